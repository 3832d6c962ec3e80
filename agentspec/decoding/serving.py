"""The ToolSpec decoder as the server's decoding path (``agentspec serve --decoder toolspec``).

:class:`ServingDecoder` is what :class:`agentspec.serve.engine.Engine` takes as
``decoder=``: for each greedy request (temperature 0) it opens a
:class:`~agentspec.decoding.decoder.Generation` stepped by the engine exactly
like its own generations (same lock, prefix cache, cancellation); sampled
requests keep the engine's own path.

Per request, the response's ``usage`` carries an extra field
``agentspec_decoding`` (target forwards, tokens per forward, drafted and
accepted tokens by draft source, near ties, time by phase); with greedy
decoding it is absent.

Hints: a request may carry ``"agentspec_hints": ["predicted completion
text", ...]`` (OpenAI SDK: ``extra_body={"agentspec_hints": [...]}``); they
join the draft tree as branches and are never waited for (see
:mod:`agentspec.decoding.hint_drafter`).  In-process callers (a SPORK probe
running beside the authority) can also put hints while the request runs:
:meth:`RequestContext.put_hint` from any thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from agentspec.decoding.decoder import Generation, ToolSpecDecoder
from agentspec.decoding.drafter import Hint
from agentspec.decoding.stats import DraftStats
from agentspec.models.local import LocalModel

__all__ = ["RequestContext", "ServingDecoder", "toolspec_decoder"]


@dataclass(eq=False)
class RequestContext:
    """What the decoder needs from one chat request, and where its statistics end up."""

    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    hints: list[str] = field(default_factory=list)
    stats: DraftStats | None = None
    generation: Generation | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _late: list[Hint] = field(default_factory=list, repr=False)

    def put_hint(self, text: str, source: str = "hint.spork") -> None:
        """Add a hint now or, before the generation starts, as soon as it does (never blocks decoding)."""
        with self._lock:
            if self.generation is None:
                self._late.append(Hint(text, source))
                return
        self.generation.hints.put(text, source)

    def usage(self) -> dict[str, Any] | None:
        return self.stats.as_dict() if self.stats is not None else None


class ServingDecoder:
    """The engine's seam to :class:`ToolSpecDecoder` (module docstring)."""

    def __init__(self, decoder: ToolSpecDecoder) -> None:
        self.decoder = decoder

    def context(self, request: Any) -> RequestContext:
        """The context of a validated :class:`~agentspec.serve.protocol.ChatRequest`."""
        tools = [tool.function.model_dump(exclude_none=True) for tool in request.tools or []] \
            if request.tools_active else []
        messages = [{"role": m.role, "content": m.text()} for m in request.messages]
        return RequestContext(tools=tools, messages=messages, hints=list(getattr(request, "agentspec_hints", None) or []))

    def start_generation(
        self, lm: LocalModel, prompt: list[int], params: Any, reuse: tuple[int, list[tuple[Any, Any]]],
        constraint: Any, prefill_chunk: int, context: RequestContext | None,
    ) -> _ServedGeneration | None:
        """A generation for a greedy request, or None to leave the request to the engine's own path."""
        if context is None or params.temperature != 0 or lm is not self.decoder.lm:
            return None
        generation = self.decoder.start(
            prompt, max_tokens=params.max_tokens, matcher=constraint.matcher if constraint is not None else None,
            tools=context.tools, hints=context.hints, ignore_eos=params.ignore_eos,
            top_logprobs=params.top_logprobs, reuse=reuse, messages=context.messages, prefill_chunk=prefill_chunk,
        )
        with context._lock:
            context.generation = generation
            context.stats = generation.stats
            for hint in context._late:
                generation.hints.put(hint.text, hint.source)
        return _ServedGeneration(generation)


class _ServedGeneration:
    """A :class:`Generation` with the engine's generation interface (tokens as ``TokenOut``)."""

    def __init__(self, generation: Generation) -> None:
        from agentspec.serve.engine import TokenOut

        self._token = TokenOut
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

    def decode(self) -> tuple[list[Any], str | None]:
        choices, finish = self.generation.decode()
        return [self._token(id=c.token, logprob=c.logprob, top=c.top) for c in choices], finish

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
        from agentspec.models.local import load_model
        from agentspec.models.registry import resolve

        helper = Sidecar(load_model(resolve(sidecar)))
    return ServingDecoder(ToolSpecDecoder(lm, default_drafters(history), history=history, sidecar=helper))
