"""The generation protocol: how the server's engine drives a decoder, one request at a time, step by step.

A :class:`Generator` is a decoding method for one model; the engine
(:class:`agentspec.engine.scheduler.Engine`) takes one and never asks which it
is.  Two implement it: :class:`~agentspec.engine.plain.PlainGenerator`
(one forward per token, greedy or sampled; the default) and
:class:`~agentspec.decoding.serving.ServingDecoder` (ToolSpec tree decoding
for greedy requests, the plain path for the rest).

Per request the engine calls :meth:`Generator.start` and steps the
:class:`TokenStream` it returns, every step in a worker thread under the
engine's lock::

    stream = generator.start(lm, prompt, params, reuse=reuse, constraint=constraint, context=context)
    while not stream.prefilled:
        stream.prefill()                    # the next chunk of the prompt
    tokens, finish = stream.decode()        # until finish is "stop" or "length"
    cache.store(stream.covered, stream.layers())
    stream.close()                          # always, however the request ended

:meth:`Generator.context` gives the request's context, a type of the
decoder's own (ToolSpec's: :class:`~agentspec.decoding.serving.RequestContext`,
with tools, messages, hints in, per-request statistics out), or None when the
method needs none; the engine only carries it from :meth:`Generator.context`
to :meth:`Generator.start`.  This module also owns the value types of the
seam: :class:`SamplingParams` in, :class:`TokenOut` out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from agentspec.engine.grammar import GrammarConstraint
from agentspec.engine.kv_cache import Reuse
from agentspec.engine.model import LocalModel

__all__ = ["ContextT", "Generator", "SamplingParams", "TokenOut", "TokenStream", "drain"]

ContextT = TypeVar("ContextT")
"""A decoder's per-request context (module docstring): its own type, opaque to the engine."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to pick tokens: ``temperature`` 0 is greedy (deterministic); ``seed`` makes sampling repeatable."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    top_logprobs: int = 0
    ignore_eos: bool = False


@dataclass(frozen=True, slots=True)
class TokenOut:
    """One generated token, its log probability under the model (before any grammar mask) and the top alternatives."""

    id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@runtime_checkable
class TokenStream(Protocol):
    """One request's generation, stepped by the engine (not thread-safe: one step at a time)."""

    @property
    def cached(self) -> int:
        """Prompt tokens whose key/values came from ``reuse`` (not computed)."""
        ...

    @property
    def prefilled(self) -> bool:
        """The whole prompt is computed; :meth:`decode` may run."""
        ...

    @property
    def covered(self) -> list[int]:
        """The tokens whose key/values the cache holds, in order (for the prefix cache)."""
        ...

    def layers(self) -> list[tuple[Any, Any]]:
        """The per-layer (keys, values) covering :attr:`covered`."""
        ...

    def prefill(self) -> None:
        """Compute the next chunk of the prompt."""
        ...

    def decode(self) -> tuple[list[TokenOut], str | None]:
        """The next token(s) and, when generation ends, why (``"stop"`` or ``"length"``)."""
        ...

    def close(self) -> None:
        """End the request (called once, however it ended); release what it holds beyond its cache."""
        ...


@runtime_checkable
class Generator(Protocol[ContextT]):
    """A decoding method for one model, as the server's engine drives it (module docstring)."""

    def context(self, tools: list[dict[str, Any]], messages: list[dict[str, Any]],
                hints: list[tuple[str, str]]) -> ContextT | None:
        """The request's context for this method, or None.  ``hints``: predicted completions with their draft
        source (``hint.client`` for a client's texts, ``hint.speculator`` for a speculator's predicted call)."""
        ...

    def start(
        self, lm: LocalModel, prompt: list[int], params: SamplingParams, *, reuse: Reuse = (0, []),
        constraint: GrammarConstraint | None = None, prefill_chunk: int = 2048,
        context: ContextT | None = None,
    ) -> TokenStream:
        """Open one request on ``lm``: ``reuse`` is a prefix-cache entry, ``constraint`` the tool grammar, if any."""
        ...


def drain(stream: TokenStream) -> list[TokenOut]:
    """Run ``stream`` to its end without an engine (tests, experiments): prefill, decode until it finishes, close."""
    try:
        while not stream.prefilled:
            stream.prefill()
        out: list[TokenOut] = []
        finish = None
        while finish is None:
            tokens, finish = stream.decode()
            out.extend(tokens)
        return out
    finally:
        stream.close()
