"""One forward for the rows of several requests, each with its own KV cache: the engine's batching mechanism.

Decoders (:mod:`agentspec.engine.plain`, the ToolSpec decoder) call the
model themselves, through :class:`~agentspec.engine.kv_cache.TargetSequence`
(``lm.model(...)`` for causal steps, the decoder body for tree forwards).
Rather than rewrite them around a batch, :func:`route_forwards` makes the
model's two entry points *routable*: a call made from a thread that takes part
in a :class:`ForwardStep` is handed to that step, which waits until every
participant is either waiting on a forward or finished, and then runs all
waiting calls as one fused forward (:func:`fused_forward`).  Calls from any
other thread run the model exactly as before, so routing changes nothing for
code outside the engine.

The fused forward is "ragged": the rows of every call are stacked into one
sequence for the token-wise work (embeddings, norms, the packed linear
layers, the MLP, the output head: this is where 2-4 rows cost about one), while
attention runs per call against that call's own cache with the mask the call
would have had alone (the cache hands attention
:class:`~agentspec.engine.grouped_attention.Ragged` keys, which
:func:`~agentspec.engine.grouped_attention.grouped_sdpa` splits per call).
Nothing is padded.  The packed linear layers compute each row independently
of the others (checked bit for bit), so every call gets exactly the numbers it would get alone and
greedy decoding stays identical token for token.

Worked example (two requests, one decoding a token, one prefilling a 5-token
chunk)::

    rows    [a0 | b0 b1 b2 b3 b4]         one (1, 6, H) hidden state
    linear  all 6 rows in one product     (packed weights streamed once)
    attn    a0 vs cache A (no mask);  b0..b4 vs cache B (causal mask)
    head    rows a0 and b4 (each call's ``logits_to_keep``)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import MethodType, SimpleNamespace
from typing import Any

from agentspec.engine.grouped_attention import IMPLEMENTATION, Ragged
from agentspec.engine.model import require

__all__ = ["ForwardStep", "fused_forward", "participating", "route_forwards"]

_local = threading.local()


@dataclass(eq=False)
class _Call:
    """One intercepted model call: ``kind`` is ``lm`` (logits) or ``body`` (hidden states)."""

    kind: str
    input_ids: Any
    attention_mask: Any
    position_ids: Any
    cache: Any
    logits_to_keep: int
    done: bool = False
    result: Any = None
    error: BaseException | None = None


class _CallCaches:
    """Stands for the calls' caches in a fused forward: ``update`` splits the new rows and returns per-call keys."""

    def __init__(self, caches: list[Any], sizes: list[int]) -> None:
        self.caches, self.sizes = caches, sizes

    def update(self, keys: Any, values: Any, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[Ragged, Ragged]:
        out_k, out_v, start = Ragged(sizes=self.sizes), Ragged(), 0
        for cache, size in zip(self.caches, self.sizes, strict=True):
            rows = slice(start, start + size)
            k, v = cache.update(keys[:, :, rows, :], values[:, :, rows, :], layer_idx, *args, **kwargs)
            out_k.parts.append(k)
            out_v.parts.append(v)
            start += size
        return out_k, out_v


_route_lock = threading.Lock()


def route_forwards(model: Any) -> bool:
    """Make ``model`` (a causal LM) routable (module docstring); idempotent.  Outside a step nothing changes.

    False (and nothing done) when the model does not attend through
    :func:`~agentspec.engine.grouped_attention.grouped_sdpa`, which alone
    understands a fused forward's per-request keys: such a model steps one
    request at a time.
    """
    with _route_lock:
        if getattr(model, "_agentspec_routed", False):
            return True
        if getattr(model.config, "_attn_implementation", None) != IMPLEMENTATION:
            return False
        body = model.get_decoder()
        for module, kind in ((model, "lm"), (body, "body")):
            original = module.forward
            module._agentspec_forward = original
            module.forward = MethodType(_make_router(original, kind), module)
        model._agentspec_routed = True
        return True


def _make_router(original: Any, kind: str) -> Any:
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        step: ForwardStep | None = getattr(_local, "step", None)
        if step is None or args or kwargs.get("inputs_embeds") is not None or step.model is None:
            return original(*args, **kwargs)
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if cache is None or not kwargs.get("use_cache", True):
            return original(*args, **kwargs)
        keep = kwargs.get("logits_to_keep", 0)
        call = _Call(kind, kwargs["input_ids"], kwargs.get("attention_mask"), kwargs.get("position_ids"), cache,
                     int(keep) if kind == "lm" else 0)
        return step.submit(call)

    return forward


@contextmanager
def _unrouted() -> Iterator[None]:
    step = getattr(_local, "step", None)
    _local.step = None
    try:
        yield
    finally:
        _local.step = step


@contextmanager
def participating(step: ForwardStep) -> Iterator[None]:
    """Route this thread's model calls to ``step`` for the block; the thread leaves the step at its end."""
    _local.step = step
    try:
        yield
    finally:
        _local.step = None
        step.leave()


class ForwardStep:
    """A rendezvous of ``participants`` threads: their model calls run together, one fused forward per round.

    A round runs when every participant still in the step is waiting on a
    forward (or has left); the last one to arrive runs it for all.
    """

    def __init__(self, model: Any, participants: int) -> None:
        self.model = model
        self.forwards = 0
        """Fused forwards run (rounds); with one call in a round the model's own forward runs it."""
        self.rows = 0
        self._cond = threading.Condition()
        self._running = participants
        self._pending: list[_Call] = []

    def submit(self, call: _Call) -> Any:
        with self._cond:
            self._pending.append(call)
            self._running -= 1
            ready = self._take()
        if ready:
            self._run(ready)
        with self._cond:
            while not call.done:
                self._cond.wait()
        if call.error is not None:
            raise call.error
        return call.result

    def leave(self) -> None:
        with self._cond:
            self._running -= 1
            ready = self._take()
        if ready:
            self._run(ready)

    def _take(self) -> list[_Call]:
        if self._running > 0 or not self._pending:
            return []
        ready, self._pending = self._pending, []
        return ready

    def _run(self, calls: list[_Call]) -> None:
        try:
            with _unrouted():
                results = fused_forward(self.model, calls)
            for call, result in zip(calls, results, strict=True):
                call.result = result
        except BaseException as exc:  # every waiting participant gets the error, none hangs
            for call in calls:
                call.error = exc
        with self._cond:
            self.forwards += 1
            self.rows += sum(int(c.input_ids.shape[-1]) for c in calls)
            for call in calls:
                call.done = True
            self._running += len(calls)
            self._cond.notify_all()


def fused_forward(model: Any, calls: list[_Call]) -> list[Any]:
    """Run ``calls`` in one ragged forward (module docstring); each result is what its call alone returns.

    A lone call runs the model's own forward unchanged.
    """
    torch = require("torch")
    body = model.get_decoder()
    if len(calls) == 1:
        call = calls[0]
        module = model if call.kind == "lm" else body
        kwargs: dict[str, Any] = {"input_ids": call.input_ids, "cache": call.cache, "use_cache": True}
        if call.attention_mask is not None:
            kwargs["attention_mask"] = call.attention_mask
        if call.position_ids is not None:
            kwargs["position_ids"] = call.position_ids
        if call.kind == "lm":
            kwargs["logits_to_keep"] = call.logits_to_keep
        with torch.inference_mode():
            return [module._agentspec_forward(**kwargs)]
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    config = model.config.get_text_config()
    builders = {"full_attention": create_causal_mask, "sliding_attention": create_sliding_window_causal_mask}
    layer_types = sorted(set(getattr(config, "layer_types", None) or ["full_attention"]))
    with torch.inference_mode():
        embeds, positions, sizes = [], [], []
        masks: dict[str, Ragged] = {kind: Ragged() for kind in layer_types}
        for call in calls:
            embed = body.embed_tokens(call.input_ids)
            size = int(embed.shape[1])
            pos = call.position_ids
            if pos is None:  # exactly the default a lone call gets
                pos = (torch.arange(size) + call.cache.get_seq_length()).unsqueeze(0)
            for kind in layer_types:
                masks[kind].parts.append(builders[kind](config=config, inputs_embeds=embed,
                                                        attention_mask=call.attention_mask, cache=call.cache,
                                                        position_ids=pos))
            embeds.append(embed)
            positions.append(pos)
            sizes.append(size)
        ragged = _CallCaches([call.cache for call in calls], sizes)
        hidden = _layers(body, config, torch.cat(embeds, dim=1), torch.cat(positions, dim=1), masks, ragged)
        results: list[Any] = [None] * len(calls)
        head_rows: list[int] = []
        start = 0
        for i, (call, size) in enumerate(zip(calls, sizes, strict=True)):
            if call.kind == "body":
                results[i] = SimpleNamespace(last_hidden_state=hidden[:, start:start + size])
            else:
                keep = size if call.logits_to_keep == 0 else min(call.logits_to_keep, size)
                head_rows.extend(range(start + size - keep, start + size))
            start += size
        if head_rows:
            logits = model.get_output_embeddings()(hidden[:, head_rows])
            offset = 0
            for i, (call, size) in enumerate(zip(calls, sizes, strict=True)):
                if call.kind == "lm":
                    keep = size if call.logits_to_keep == 0 else min(call.logits_to_keep, size)
                    results[i] = SimpleNamespace(logits=logits[:, offset:offset + keep])
                    offset += keep
    return results


def _layers(body: Any, config: Any, hidden: Any, positions: Any, masks: dict[str, Ragged],
            cache: _CallCaches) -> Any:
    """The decoder body's own loop (Llama and Qwen2 alike) over stacked rows with per-call masks and caches."""
    position_embeddings = body.rotary_emb(hidden, position_ids=positions)
    types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    for i, layer in enumerate(body.layers[: config.num_hidden_layers]):
        hidden = layer(hidden, attention_mask=masks[types[i]], position_embeddings=position_embeddings,
                       position_ids=positions, cache=cache, use_cache=True)
    return body.norm(hidden)
