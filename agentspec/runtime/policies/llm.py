"""A model behind an OpenAI-compatible endpoint as a policy, in either role: the chat it is sent (one message pair
per committed step), the predicted calls it may take as draft hints, and chain verification over the wire.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agentspec.errors import ConfigError, ModelOutputError
from agentspec.models import ModelClient, chain_verification
from agentspec.models.result import ChatResult, TextDelta
from agentspec.runtime.chain_verification import MAX_CHAIN, Chain, ChainVerdict
from agentspec.runtime.conversation import SAY, say
from agentspec.runtime.policies.protocol import Decision, History, Progress
from agentspec.types import Message, Observation, ToolCall, ToolSpec

FINAL_ANSWER = "FINAL ANSWER:"
"""A text reply ending with this marker and an answer finishes the task like a ``done(answer=...)`` call."""


HINT_CALLS = 8
"""Predicted calls sent with one request at most (``agentspec serve`` refuses more)."""
HINT_CALL_BYTES = 24 * 1024
"""A predicted call larger than this (canonical JSON) is not sent: the server caps a rendered hint at 32 KiB and
its request's hints at 128 KiB, and a hint too big to send must never cost the authority its answer."""


def hintable(calls: Sequence[ToolCall]) -> list[ToolCall]:
    """The predicted calls worth sending as hints: small enough that the server takes them, in order, within the
    server's per-request bounds (at most :data:`HINT_CALLS`, four times :data:`HINT_CALL_BYTES` in all)."""
    kept: list[ToolCall] = []
    total = 0
    for call in calls:
        size = len(call.canonical().encode())
        if size > HINT_CALL_BYTES or total + size > 4 * HINT_CALL_BYTES or len(kept) == HINT_CALLS:
            continue
        kept.append(call)
        total += size
    return kept


def history_messages(system_prompt: str, history: History) -> list[Message]:
    """The history as a chat: one assistant tool call and its result per step (a message to the user and its
    reply as two texts).

    Each call is named by its step (``step_3``), not by the id it had: a step reads the same whether the authority
    made it or a confirmed draft did, so a model sees (and a recording keys) the same prompt either way."""
    messages = [Message(role="system", content=system_prompt)]
    for step, (call, observation) in enumerate(history):
        messages += step_messages(step, call, observation)
    return messages


def step_messages(step: int, call: ToolCall, observation: Observation | None) -> list[Message]:
    """What :func:`history_messages` appends for the history's step ``step``: the call, then its result."""
    call = call.model_copy(update={"id": f"step_{step}"})
    if call.name == SAY:  # normal mode: the agent's text, then the user's reply
        said = [Message(role="assistant", content=str(call.arguments.get("content", "")))]
        return said + ([Message(role="user", content=observation.content)] if observation is not None else [])
    content = observation.content if observation else "(still running)"
    return [Message(role="assistant", tool_calls=[call]), Message(role="tool", content=content, tool_call_id=call.id)]


@dataclass
class LLMPolicy:
    """A model choosing the next call from the history; ``done_tool`` ends the task."""

    client: ModelClient
    system_prompt: str
    tools: list[ToolSpec]
    done_tool: str = "done"
    temperature: float | None = 0.0
    max_tokens: int | None = None
    queue_extra_calls: bool = True
    """Authority: make further calls of a multi-call answer in later steps.  Speculator: ignore them."""
    tool_choice: str = "required"
    """``"required"`` constrains the answer to a call; ``"auto"`` lets the model write text (reasoning) first."""
    answer_prefix: str = ""
    """Text every answer starts with (``"<think>\n"``, ``"Thought:"``): sent as an unfinished assistant
    message the endpoint continues (``continue_final_message``), so the model reasons before it calls."""
    predicted_hints: bool = False
    """Send the speculator's predicted calls (a :class:`PredictedHistory`) as ``agentspec_predicted_calls``: the
    ToolSpec decoder drafts them, so a right prediction is verified in a forward or two instead of one per token.
    Each request is also named (``agentspec_request_id``), so that a prediction ready only while it runs still
    reaches it (:meth:`hint`)."""
    conversation: bool = False
    """Normal mode: a text answer is a message to the user (:data:`~agentspec.runtime.conversation.SAY`)."""
    _queued: list[ToolCall] = field(default_factory=list)
    """Further calls of a multi-call answer, made one per step before asking again."""
    _in_flight: tuple[str, int] | None = None
    """The running request's ``agentspec_request_id`` and how many committed steps its history holds."""

    async def decide(self, history: History) -> Decision:
        if self._queued:
            return Decision(call=self._queued.pop(0))
        request_id = uuid.uuid4().hex if self.predicted_hints else None
        request = self._request(history, request_id)
        with self._running(request_id, history):
            result = await self.client.chat(self._messages(history), **request)
        return self._decision(result)

    def deciding(self, steps: int) -> bool:
        """Whether a named request is deciding the step after ``steps`` committed steps (it can take hints)."""
        return self.predicted_hints and self._in_flight is not None and self._in_flight[1] == steps

    async def hint(self, calls: Sequence[ToolCall], steps: int) -> bool:
        """Hand ``calls``, predicted for the decision after ``steps`` committed steps, to the request deciding it
        while it runs: whether its endpoint took them.  Nothing is sent unless that decision is in flight."""
        if not calls or not self.deciding(steps):
            return False
        assert self._in_flight is not None
        predicted = [{"name": c.name, "arguments": c.arguments, "source": "speculator"} for c in hintable(calls)]
        if not predicted:
            return False
        return await self.client.send_hints(self._in_flight[0], predicted)

    @contextmanager
    def _running(self, request_id: str | None, history: History) -> Iterator[None]:
        self._in_flight = (request_id, len(history)) if request_id is not None else None
        try:
            yield
        finally:
            self._in_flight = None

    async def decide_streaming(
        self, history: History, progress: Progress, request_id: str | None = None,
    ) -> Decision:
        """Like :meth:`decide`, reporting the text so far and a token count as the answer streams in.

        ``request_id`` names the request on the server (``agentspec_request_id``)
        so that probes can send it draft hints while it runs.
        """
        if self._queued:
            return Decision(call=self._queued.pop(0))
        text, tokens = "", 0
        request = self._request(history, request_id)
        with self._running(request_id, history):
            async with self.client.stream_chat(self._messages(history), **request) as stream:
                async for event in stream:
                    if isinstance(event, ChatResult):
                        return self._decision(event)
                    tokens += 1
                    if isinstance(event, TextDelta):
                        text += event.text
                    await progress(text, tokens)
        raise ModelOutputError("the stream ended without a result")

    async def verification(self) -> str | None:
        """None when the endpoint can verify chains (probed once per client: ``agentspec serve``'s
        ``verify_chain``, else prompt log-probabilities), else why not."""
        if self.answer_prefix:
            return (f"the agent starts each answer with {self.answer_prefix!r} and reasons before its call, so a "
                    "chain of bare calls is not what it writes")
        found = await chain_verification.support(self.client)
        return None if self._wire_path(found) else found.reason or "no verification path"

    async def verify_chain(self, history: History, steps: Chain) -> ChainVerdict:
        """The longest prefix of ``steps`` the model makes itself after ``history``, verified in one request (the
        conversation exactly as :meth:`decide` would send it); calls still queued from a multi-call answer are
        the model's next decisions, so against them the chain is compared (and the accepted ones dequeued)."""
        steps = list(steps)[:MAX_CHAIN]
        if self._queued:
            return self._verify_queued(steps)
        path = self._wire_path(await chain_verification.support(self.client))
        if path is None:
            raise ConfigError(await self.verification() or "the endpoint cannot verify chains")
        from agentspec.engine.grammar import render_call  # the text the model writes a call as (numpy: lazy)

        wire = [chain_verification.WireStep(call, step_messages(len(history) + k, call, observation),
                               render_call(call.name, call.arguments)) for k, (call, observation) in enumerate(steps)]
        answer = await chain_verification.verify(self.client, path, self._messages(history), self.tools, wire,
                                    tool_choice=self.tool_choice)
        accepted = min(answer.accepted, len(steps))
        return ChainVerdict(accepted=accepted, steps=len(steps), next_text=answer.next_text, forwards=answer.forwards,
                            prompt_tokens=answer.prompt_tokens, seconds=answer.verify_s)

    def _wire_path(self, found: chain_verification.Support) -> chain_verification.WirePath | None:
        """The path to verify by: the server's own (grammar-masked greedy, a call forced) when every answer must be
        a call; prompt log-probabilities (the unconstrained argmax, which a text answer may beat) otherwise."""
        order: list[chain_verification.WirePath] = ["verify_chain", "prompt_logprobs"]
        if self.tool_choice != "required":
            order.reverse()
        return next((path for path in order if path in found.paths), None)

    def _verify_queued(self, steps: list[tuple[ToolCall, Observation]]) -> ChainVerdict:
        judged = min(len(steps), len(self._queued))
        accepted = next((k for k in range(judged) if steps[k][0] != self._queued[k]), judged)
        del self._queued[:accepted]
        return ChainVerdict(accepted=accepted, steps=judged)

    def _messages(self, history: History) -> list[Message]:
        messages = history_messages(self.system_prompt, history)
        if self.answer_prefix:
            messages.append(Message(role="assistant", content=self.answer_prefix))
        return messages

    def _request(self, history: History = (), request_id: str | None = None) -> dict[str, Any]:
        """The chat request's keyword arguments; ``request_id`` names it (``agentspec_request_id``) for hints."""
        request: dict[str, Any] = {"tools": self.tools, "tool_choice": self.tool_choice, "temperature": self.temperature,
                                   "max_tokens": self.max_tokens}
        extra: dict[str, Any] = {}
        if self.answer_prefix:
            extra |= {"continue_final_message": True, "add_generation_prompt": False}
        predicted = getattr(history, "predicted", None)
        if self.predicted_hints and predicted:
            if hinted := hintable(predicted):
                extra["agentspec_predicted_calls"] = [{"name": c.name, "arguments": c.arguments} for c in hinted]
        if request_id is not None:
            extra["agentspec_request_id"] = request_id
        if extra:
            request["extra_body"] = extra
        return request

    def _decision(self, result: ChatResult) -> Decision:
        usage = result.usage
        decision = functools.partial(
            Decision, prompt_tokens=usage.prompt_tokens if usage else 0, output_tokens=usage.completion_tokens if usage else 0,
            forwards=usage.forwards if usage else None, hint_tokens=usage.hint_tokens if usage else None)
        calls = result.message.tool_calls
        if not calls:
            if result.invalid_tool_calls:
                return decision(call=None, invalid=result.invalid_tool_calls[0])
            if self.conversation and result.message.content:
                return decision(call=say(result.message.content))
            answer = self._final_answer(result.message.content or "")
            if answer is not None:
                return decision(call=None, final={"answer": answer})
            return decision(call=None, text=result.message.content or "")
        if calls[0].name == self.done_tool:
            return decision(call=None, final=calls[0].arguments)
        if self.queue_extra_calls:
            self._queued = [c for c in calls[1:] if c.name != self.done_tool]
        return decision(call=calls[0])

    def _final_answer(self, text: str) -> str | None:
        """The answer of a text reply ending ``FINAL ANSWER: ...`` (GAIA's convention, for endpoints that do not
        force a tool call), when the done tool takes an ``answer``; None otherwise."""
        done = next((spec for spec in self.tools if spec.name == self.done_tool), None)
        if done is None or "answer" not in done.parameters.get("properties", {}):
            return None
        _, marker, answer = text.rpartition(FINAL_ANSWER)
        return answer.strip() if marker and answer.strip() else None
