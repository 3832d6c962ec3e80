"""Chain verification over the wire: the two ways an endpoint can tell which pre-executed calls are its own.

A chain is the conversation's next steps, each a call and the messages committing it appends (the assistant
message carrying the call, then its result).  An endpoint verifies it in one request, by one of:

* ``verify_chain``: ``agentspec serve``'s ``POST /v1/agentspec/verify_chain`` (announced by ``GET
  /v1/agentspec/capabilities``): the server checks each call's tokens against its grammar-masked greedy choice
  and answers how many steps it accepts;
* ``prompt_logprobs``: any endpoint that returns vLLM-style prompt log-probabilities: the whole conversation
  through the chain's last step is sent with ``max_tokens: 1`` and ``prompt_logprobs: 1``, each call's tokens are
  found in the prompt (by the text the model writes a call as, ``call_text``) and a step is accepted while every
  one of its tokens, and the stop after it, has rank 1.  Conservative: the unconstrained argmax may refuse what
  the grammar-masked choice accepts, never the reverse.

:func:`support` probes an endpoint once per client (cached) and says which it has, or why it has neither.  A
recording (:mod:`agentspec.models.cassette`) keeps the probe's answer and each verification's; a replay of a
recording without them verifies nothing (the probe answers "cannot", with the reason).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentspec.errors import ModelOutputError, ModelRequestError
from agentspec.models.cassette import ReplayMiss
from agentspec.models.client import ModelClient
from agentspec.models.parsing import to_openai_messages
from agentspec.types import Message, ToolCall, ToolSpec

WirePath = Literal["verify_chain", "prompt_logprobs"]
CAPABILITIES = "/agentspec/capabilities"
VERIFY = "/agentspec/verify_chain"


class Support(BaseModel):
    """What an endpoint offers for chain verification: its paths (none: ``reason`` says why)."""

    model_config = ConfigDict(extra="forbid")

    paths: list[WirePath] = Field(default_factory=list)
    reason: str | None = None


class VerifyAnswer(BaseModel):
    """One verification's outcome, as both paths give it (and a recording stores it)."""

    model_config = ConfigDict(extra="ignore")

    accepted: int = Field(ge=0)
    steps: int = Field(ge=0)
    next_text: str | None = None
    forwards: int = Field(default=1, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    cached_tokens: int = Field(default=0, ge=0)
    verify_s: float = Field(default=0.0, ge=0)


@dataclass(frozen=True)
class WireStep:
    """One chain step: its call, the messages committing it appends, and the text the model writes it as."""

    call: ToolCall
    messages: list[Message]
    call_text: str


@dataclass
class _Probe:
    lock: anyio.Lock
    support: Support | None = None


_PROBES: weakref.WeakKeyDictionary[ModelClient, _Probe] = weakref.WeakKeyDictionary()


async def support(client: ModelClient) -> Support:
    """Which verification paths ``client``'s endpoint has: probed once per client, then cached (recorded)."""
    probe = _PROBES.setdefault(client, _Probe(anyio.Lock()))
    async with probe.lock:
        if probe.support is None:
            probe.support = await _recorded_probe(client)
    return probe.support


async def _recorded_probe(client: ModelClient) -> Support:
    body = {"agentspec_probe": "chain_verification"}
    tape = client.tape
    if tape is not None:
        try:
            recorded = tape.answer(body)
        except ReplayMiss:
            return Support(reason=f"the recording {tape.cassette.folder} holds no chain verification answers "
                           "(recorded before verification existed)")
        if recorded is not None:
            return Support.model_validate(recorded)
    found = await _probe(client)
    if tape is not None:
        tape.store(body, found.model_dump(mode="json"))
    return found


async def _probe(client: ModelClient) -> Support:
    """``agentspec serve``'s capabilities route, else a 1-token request asking for prompt log-probabilities."""
    capabilities = await client.agentspec_get(CAPABILITIES)
    paths: list[WirePath] = []
    if capabilities is not None and capabilities.get("verify_chain") is True:
        paths.append("verify_chain")
    if capabilities is not None and capabilities.get("prompt_logprobs") is True or await _has_prompt_logprobs(client):
        paths.append("prompt_logprobs")
    if paths:
        return Support(paths=paths)
    return Support(reason=f"endpoint {client.config.base_url} has neither /agentspec/verify_chain nor prompt_logprobs")


async def _has_prompt_logprobs(client: ModelClient) -> bool:
    try:
        data = await client.completion([Message(role="user", content="Say OK.")], max_tokens=1, temperature=0.0,
                                       extra_body={"prompt_logprobs": 1})
    except ModelRequestError:
        return False  # a 4xx: the endpoint refuses the field
    try:
        return bool(prompt_tokens(data))
    except ModelOutputError:
        return False


async def verify(client: ModelClient, path: WirePath, messages: list[Message], tools: Sequence[ToolSpec],
                 chain: Sequence[WireStep], *, tool_choice: str | None = None) -> VerifyAnswer:
    """How many leading steps of ``chain``, after the conversation ``messages``, the endpoint makes itself
    (recorded and replayed like completions)."""
    body = {"agentspec_verify_chain": path, "messages": to_openai_messages(messages),
            "tools": [tool.openai_schema() for tool in tools], "tool_choice": tool_choice,
            "chain": [{"call": {"name": s.call.name, "arguments": s.call.arguments},
                       "messages": to_openai_messages(s.messages)} for s in chain]}
    tape = client.tape
    recorded = tape.answer(body) if tape is not None else None
    if recorded is not None:
        return VerifyAnswer.model_validate(recorded)
    if path == "verify_chain":
        answer = await _by_route(client, body)
    else:
        answer = await _by_prompt_logprobs(client, messages, tools, chain, tool_choice)
    if tape is not None:
        tape.store(body, answer.model_dump(mode="json"))
    return answer


async def _by_route(client: ModelClient, body: dict[str, Any]) -> VerifyAnswer:
    request = {"model": await client.resolve_model(), "messages": body["messages"], "tools": body["tools"],
               "chain": body["chain"]}
    data = await client.agentspec_post(VERIFY, request)
    try:
        return VerifyAnswer.model_validate(data)
    except ValidationError as exc:
        raise ModelOutputError(f"{VERIFY} answered an unusable body: {exc}") from exc


async def _by_prompt_logprobs(client: ModelClient, messages: list[Message], tools: Sequence[ToolSpec],
                              chain: Sequence[WireStep], tool_choice: str | None) -> VerifyAnswer:
    conversation = [*messages, *(m for step in chain for m in step.messages)]
    started = time.perf_counter()
    data = await client.completion(conversation, tools=list(tools) or None, tool_choice=tool_choice, max_tokens=1,
                                   temperature=0.0, extra_body={"prompt_logprobs": 1})
    seconds = time.perf_counter() - started
    accepted, next_text = accepted_by_ranks(prompt_tokens(data), [step.call_text for step in chain])
    if accepted == len(chain):
        choice = (data.get("choices") or [{}])[0]
        next_text = (choice.get("message") or {}).get("content") or None
    usage = data.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return VerifyAnswer(accepted=accepted, steps=len(chain), next_text=next_text, forwards=1,
                        prompt_tokens=usage.get("prompt_tokens") or 0, cached_tokens=cached, verify_s=seconds)


@dataclass(frozen=True)
class PromptToken:
    """One prompt token as the endpoint scored it: its text, its rank (1: the argmax), the argmax's text."""

    text: str
    rank: int
    greedy: str


def prompt_tokens(data: dict[str, Any]) -> list[PromptToken]:
    """The prompt's tokens from a completion's vLLM-style ``prompt_logprobs`` (asked with ``prompt_logprobs: 1``:
    each entry holds the prompt token and, when that is not the argmax, the argmax).  The first token has no
    entry (nothing predicts it): empty text, rank 1.  :class:`ModelOutputError` when the body has none."""
    entries = data.get("prompt_logprobs")
    if not isinstance(entries, list) or not any(isinstance(e, dict) and e for e in entries):
        raise ModelOutputError("the endpoint answered without prompt_logprobs")
    tokens: list[PromptToken] = []
    for entry in entries:
        if not entry:
            tokens.append(PromptToken("", 1, ""))
            continue
        try:
            ranked = sorted(((int(v["rank"]), str(v["decoded_token"])) for v in entry.values()), reverse=True)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelOutputError(f"a prompt_logprobs entry without rank and decoded_token: {entry!r}") from exc
        rank, text = ranked[0]  # the prompt token: the highest rank (the argmax, rank 1, when it is alone)
        tokens.append(PromptToken(text, rank, ranked[-1][1] if ranked[-1][0] == 1 else text))
    return tokens


def accepted_by_ranks(tokens: Sequence[PromptToken], call_texts: Sequence[str]) -> tuple[int, str | None]:
    """How many leading calls are the model's greedy choice, and at a refusal the model's own text there (the
    call's text up to the first token that is not rank 1, then the argmax token).

    The calls end the prompt in order, so each is found by its last occurrence before the next one's; a call's
    span is every token overlapping its text, then the token after it (the turn's stop).  A call whose text is
    not in the prompt (a template that writes calls otherwise) is refused: conservative."""
    text = "".join(token.text for token in tokens)
    starts: list[int] = []
    offset = 0
    for token in tokens:
        starts.append(offset)
        offset += len(token.text)
    found: list[tuple[int, int] | None] = []
    bound = len(text)
    for call_text in reversed(call_texts):
        at = text.rfind(call_text, 0, bound)
        found.append(None if at < 0 else (at, at + len(call_text)))
        bound = at if at >= 0 else bound
    found.reverse()
    for index, where in enumerate(found):
        if where is None:
            return index, None
        span = [i for i, token in enumerate(tokens) if starts[i] < where[1] and starts[i] + len(token.text) > where[0]]
        if span and span[-1] + 1 < len(tokens):
            span.append(span[-1] + 1)  # the stop that ends the turn: the model's choice too
        for position, i in enumerate(span):
            if tokens[i].rank != 1:
                return index, "".join(tokens[j].text for j in span[:position]) + tokens[i].greedy
    return len(call_texts), None
