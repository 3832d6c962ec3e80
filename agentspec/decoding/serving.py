"""The ToolSpec decoder as the server's decoding path (``agentspec serve --decoder toolspec``).

:class:`ServingDecoder` is a :class:`~agentspec.engine.generation.Generator`
(the protocol :class:`agentspec.engine.scheduler.Engine` drives): each greedy
request (temperature 0) with a context runs as a
:class:`~agentspec.decoding.decoder.Generation`, stepped by the engine exactly
like plain generations (same lock, prefix cache, cancellation); sampled
requests take the plain path (:class:`~agentspec.engine.plain.PlainGenerator`).

Per request, the response's ``usage`` carries an extra field
``agentspec_decoding`` (target forwards, tokens per forward, drafted and
accepted tokens by draft source, near ties, time by phase); with greedy
decoding it is absent.

Hints: a request may carry ``"agentspec_hints": ["predicted completion
text", ...]`` (OpenAI SDK: ``extra_body={"agentspec_hints": [...]}``); they
join the draft tree as branches and are never waited for (see
:mod:`agentspec.decoding.hint_drafter`).  In-process callers (a SPORK probe
running beside the authority) can also put hints while the request runs:
:meth:`RequestContext.put_hint` from any thread.  :class:`RequestContext` is
the decoder's per-request context (the engine carries it, opaque, from
:meth:`ServingDecoder.context` to :meth:`ServingDecoder.start`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentspec.decoding.decoder import Generation, ToolSpecDecoder
from agentspec.decoding.drafter import HintBox
from agentspec.decoding.stats import DraftStats
from agentspec.engine.generation import SamplingParams, TokenOut, TokenStream
from agentspec.engine.grammar import GrammarConstraint
from agentspec.engine.kv_cache import Reuse
from agentspec.engine.model import LocalModel
from agentspec.engine.plain import PlainGenerator

__all__ = ["RequestContext", "ServingDecoder", "ToolSpecStream", "toolspec_decoder"]


@dataclass(eq=False)
class RequestContext:
    """What a decoder needs from one chat request, and where its statistics end up.

    ``tools`` are bare function dicts (``{"name", "parameters", ...}``),
    ``messages`` OpenAI-style ``{"role", "content"}`` dicts.  ``hints`` is
    the request's hint box: :meth:`put_hint` works from any thread, before or
    while the request runs, and never blocks decoding.
    """

    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    hints: HintBox = field(default_factory=HintBox)
    stats: DraftStats | None = None
    """Set by the decoder once the request runs on it; None while it has not (or runs on the plain path)."""

    def put_hint(self, text: str, source: str = "hint.spork") -> bool:
        """Add a predicted completion; the next draft tree takes it as branches.  False: the box is full."""
        return self.hints.put(text, source)

    def usage(self) -> dict[str, Any] | None:
        """The decoder's per-request statistics (``usage.agentspec_decoding``), or None."""
        return self.stats.as_dict() if self.stats is not None else None


class ServingDecoder:
    """The engine's seam to :class:`ToolSpecDecoder` (module docstring)."""

    def __init__(self, decoder: ToolSpecDecoder) -> None:
        self.decoder = decoder
        self.plain = PlainGenerator()

    def context(self, tools: list[dict[str, Any]], messages: list[dict[str, Any]],
                hints: list[tuple[str, str]]) -> RequestContext:
        box = HintBox()
        for text, source in hints:
            box.put(text, source=source)
        return RequestContext(tools=tools, messages=messages, hints=box)

    def start(
        self, lm: LocalModel, prompt: list[int], params: SamplingParams, *, reuse: Reuse = (0, []),
        constraint: GrammarConstraint | None = None, prefill_chunk: int = 2048,
        context: RequestContext | None = None,
    ) -> TokenStream:
        """A ToolSpec stream for a greedy request on this decoder's model; the plain path for any other."""
        if context is None or params.temperature != 0 or lm is not self.decoder.lm:
            return self.plain.start(lm, prompt, params, reuse=reuse, constraint=constraint,
                                    prefill_chunk=prefill_chunk)
        generation = self.decoder.start(
            prompt, max_tokens=params.max_tokens, matcher=constraint.matcher if constraint is not None else None,
            tools=context.tools, hint_box=context.hints, ignore_eos=params.ignore_eos,
            top_logprobs=params.top_logprobs, reuse=reuse, messages=context.messages, prefill_chunk=prefill_chunk,
        )
        context.stats = generation.stats
        return ToolSpecStream(generation)


class ToolSpecStream:
    """A :class:`Generation` as a :class:`~agentspec.engine.generation.TokenStream` (tokens as ``TokenOut``)."""

    def __init__(self, generation: Generation) -> None:
        self.generation = generation
        self.cached = generation.cached

    @property
    def prefilled(self) -> bool:
        return self.generation.prefilled

    @property
    def covered(self) -> list[int]:
        return self.generation.covered

    def layers(self) -> list[tuple[Any, Any]]:
        return self.generation.layers()

    def prefill(self) -> None:
        self.generation.prefill()

    def decode(self) -> tuple[list[TokenOut], str | None]:
        choices, finish = self.generation.decode()
        return [TokenOut(id=c.token, logprob=c.logprob, top=c.top) for c in choices], finish

    def close(self) -> None:
        self.generation.close()


def toolspec_decoder(lm: LocalModel, *, sidecar: str | None = None, history_path: str | None = None) -> ServingDecoder:
    """The server's ToolSpec decoder for ``lm``: default drafters, a call history, an optional sidecar model."""
    from agentspec.decoding.decoder import default_drafters
    from agentspec.decoding.retrieval_drafter import CallHistory

    history = CallHistory(history_path)
    helper = None
    if sidecar is not None:
        from agentspec.decoding.sidecar import Sidecar
        from agentspec.engine.model import load_model
        from agentspec.models.registry import resolve

        helper = Sidecar(load_model(resolve(sidecar)))
    return ServingDecoder(ToolSpecDecoder(lm, default_drafters(history), history=history, sidecar=helper))
