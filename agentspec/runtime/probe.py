"""SPORK probes: fork the authority's own prefix, force the call opening, read the call early.

While the authority is still decoding (reasoning), a probe request sends the
same conversation plus the authority's partial output and the model's own
tool-call opening as an unfinished assistant message, with a small
``max_tokens`` and logprobs.  The continuation is the call the authority is
about to make; its confidence is ``exp(min token logprob)`` over the call's
tokens, skipping the first (the opening makes the first token the least
informative: it is mostly the tool name's first piece, forced by context)::

    >>> confidence([-0.9, -0.01, -0.05, -0.02])
    0.951...

A probe that clears the gate and validates against the tool's schema is
dispatched into a fork (see :mod:`agentspec.runtime.executor`).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentspec.errors import ModelError
from agentspec.models import ModelClient
from agentspec.models.parsing import extract_tool_calls
from agentspec.runtime.latency import estimate_tokens
from agentspec.runtime.policies.llm import history_messages
from agentspec.runtime.policies.protocol import History
from agentspec.runtime.policies.scripted import next_gold
from agentspec.types import Message, ToolCall, ToolSpec

FENCED_OPENING = '```json\n{\n  "name": "'
"""The Qwen2.5-coder models write calls as fenced json blocks, indented: the opening is their own, byte for byte."""
HERMES_OPENING = '</think>\n\n<tool_call>\n{"name": "'
"""Qwen3-style hermes models: close the reasoning, open the call."""


@dataclass
class ProbeResult:
    call: ToolCall | None
    confidence: float
    tokens: int = 0
    text: str = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0


class Prober(Protocol):
    """Simulated probe time is a wrapper (:class:`~agentspec.runtime.simulated.SimulatedProbeLatency`)."""

    async def probe(self, history: History, partial: str, hint_for: str | None = None) -> ProbeResult:
        """Guess the call the authority is about to make, given its output so far.

        ``hint_for``: the server-side id of the authority's running request,
        which gets the probe's text as a draft hint (partial-token accept).
        """
        ...


def confidence(logprobs: Sequence[float]) -> float:
    """exp(min logprob) over the tokens, skipping the first; 0 when there is nothing to judge."""
    judged = list(logprobs[1:])
    return math.exp(min(judged)) if judged else 0.0


_JSON_TYPES: dict[str, type | tuple[type, ...]] = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}


def schema_errors(arguments: dict[str, Any], spec: ToolSpec) -> list[str]:
    """Why ``arguments`` do not fit ``spec.parameters`` (required, unknown keys, primitive types)."""
    schema = spec.parameters or {}
    properties: dict[str, Any] = schema.get("properties", {})
    errors = [f"missing {name}" for name in schema.get("required", []) if name not in arguments]
    for name, value in arguments.items():
        if name not in properties:
            if schema.get("additionalProperties", True) is False or properties:
                errors.append(f"unknown argument {name}")
            continue
        expected = properties[name].get("type")
        kinds = _JSON_TYPES.get(expected) if isinstance(expected, str) else None
        if kinds is not None and (not isinstance(value, kinds) or (expected in ("integer", "number") and isinstance(value, bool))):
            errors.append(f"{name} should be {expected}")
        if "enum" in properties[name] and value not in properties[name]["enum"]:
            errors.append(f"{name} not one of {properties[name]['enum']}")
    return errors


_CALL_MARKERS = ("<tool_call>", "```json")


def probe_prefix(partial: str, opening: str) -> str:
    r"""The unfinished assistant text a probe continues: ``partial`` with the call opening forced.

    If the authority has already begun its call, the call it began is
    replaced by the opening (greedy decoding writes the same tokens again),
    so the opening is never doubled::

        >>> probe_prefix('Check the line.\n```json\n{\n  "na', FENCED_OPENING)
        'Check the line.\n```json\n{\n  "name": "'
    """
    marker = next((m for m in _CALL_MARKERS if m in opening), None)
    if marker is not None and marker in partial:
        return partial[: partial.rindex(marker)] + opening[opening.index(marker):]
    return partial + opening


@dataclass
class LLMProber:
    """Probes an OpenAI-compatible endpoint that can continue a final assistant message.

    The request carries ``continue_final_message`` / ``add_generation_prompt``
    in its body, as vLLM and ``agentspec serve`` understand them, and the same
    tools as the authority's request (rendered into the same prompt; not
    enforced), so the prefix cache makes the shared prompt nearly free.
    """

    client: ModelClient
    system_prompt: str
    opening: str = FENCED_OPENING
    max_tokens: int = 48
    tools: list[ToolSpec] | None = None
    answer_prefix: str = ""
    """What the authority's answers start with (its ``answer_prefix``), before the streamed text."""

    @classmethod
    def of(cls, policy: Any, *, opening: str = FENCED_OPENING, max_tokens: int = 48) -> LLMProber:
        """A prober for an :class:`~agentspec.runtime.policies.llm.LLMPolicy`: same endpoint, prompt, tools, prefix."""
        return cls(policy.client, policy.system_prompt, opening=opening, max_tokens=max_tokens, tools=policy.tools,
                   answer_prefix=policy.answer_prefix)

    async def probe(self, history: History, partial: str, hint_for: str | None = None) -> ProbeResult:
        messages = history_messages(self.system_prompt, history)
        messages.append(Message(role="assistant", content=probe_prefix(self.answer_prefix + partial, self.opening)))
        extra: dict[str, Any] = {"continue_final_message": True, "add_generation_prompt": False}
        if hint_for is not None:
            extra["agentspec_hint_for"] = hint_for
        try:
            result = await self.client.chat(
                messages, tools=self.tools, tool_choice="auto" if self.tools else None, max_tokens=self.max_tokens,
                temperature=0.0, logprobs=True, extra_body=extra,
            )
        except ModelError:
            return ProbeResult(None, 0.0)
        # The generated text token by token: a continuation that happens to hold a whole call of its
        # own may have been parsed out of ``content``.
        text = "".join(t.token for t in result.logprobs) if result.logprobs else result.message.content or ""
        logprobs = [t.logprob for t in result.logprobs or []]
        tokens = result.usage.completion_tokens if result.usage else len(logprobs)
        call = parse_probe(self.opening, text)
        usage = result.usage
        return ProbeResult(call, confidence(logprobs) if call else 0.0, tokens, text,
                           prompt_tokens=usage.prompt_tokens if usage else 0,
                           cached_tokens=(usage.cached_tokens or 0) if usage else 0)


def parse_probe(opening: str, continuation: str) -> ToolCall | None:
    """The call in ``opening + continuation``, if it parses (possibly cut off after the arguments)."""
    body = opening[opening.index("{"):] + continuation
    found, _ = extract_tool_calls(body)
    if not found:
        # a cut-off block: close what the probe opened and try once more
        end = body.rfind("}")
        candidate = body[: end + 1] if end >= 0 else body
        try:
            found = [json.loads(candidate)]
        except json.JSONDecodeError:
            return None
    first = found[0]
    if "error" in first or not isinstance(first.get("arguments", {}), dict) or not isinstance(first.get("name"), str):
        return None
    return ToolCall(name=first["name"], arguments=first.get("arguments") or {})


@dataclass
class SimulatedProber:
    """For studying SPORK on simulated authorities: right with probability ``p_hit``.

    A right probe reports high confidence (uniform in [0.85, 1)); a wrong one
    low or high at random (so the gate matters); draws are seeded by the context.
    """

    gold: list[ToolCall]
    p_hit: float
    distractors: list[ToolCall] = field(default_factory=list)
    task_id: str = ""
    seed: int = 0

    async def probe(self, history: History, partial: str, hint_for: str | None = None) -> ProbeResult:
        truth = next_gold(self.gold, history)
        context = "|".join(call.canonical() for call, _ in history) + f"|{len(partial)}"
        rng = random.Random(int.from_bytes(hashlib.sha256(f"{self.seed}|{self.task_id}|{context}".encode()).digest()[:8], "big"))
        if truth is not None and rng.random() < self.p_hit:
            return ProbeResult(truth, 0.85 + 0.15 * rng.random(), estimate_tokens(truth.canonical()))
        wrong = [d for d in self.distractors if d != truth]
        call = rng.choice(wrong) if wrong else None
        return ProbeResult(call, rng.random(), estimate_tokens(call.canonical()) if call else 1)
