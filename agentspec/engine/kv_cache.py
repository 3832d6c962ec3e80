"""One request's KV cache on the target model: built from a prefix-cache entry, grown by forwards, cut back.

:class:`TargetSequence` is the only place a key/value cache is constructed:
the server's plain path (:mod:`agentspec.engine.plain`), the ToolSpec
decoder and verifier, the sidecar and the cost calibration all hold one.  It
starts empty or from ``reuse`` = (cached tokens, per-layer key/values) of an
earlier request (the server's prefix cache), runs causal forwards
(:meth:`TargetSequence.forward`) and tree forwards with a 4D mask
(:meth:`TargetSequence.forward_tree`), and keeps only an accepted path
(:meth:`TargetSequence.keep`).  :meth:`TargetSequence.layers` hands the
key/values back for reuse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

from agentspec.engine.model import LocalModel, require
from agentspec.engine.token_tree import TokenTree

__all__ = ["Reuse", "TargetSequence"]

Reuse: TypeAlias = tuple[int, list[tuple[Any, Any]]]
"""A prefix to start from: how many tokens are cached, and the per-layer (keys, values) covering at least those."""


class TargetSequence:
    """One request's KV cache on the target model; ``length`` tokens are cached (all committed but the pending one)."""

    def __init__(self, lm: LocalModel, reuse: Reuse = (0, [])) -> None:
        self.torch = require("torch")
        transformers = require("transformers")
        self.lm = lm
        cached, layers = reuse
        # Slices of the entry's tensors: a cache only grows by concatenation into new tensors, never in place,
        # so the entry (or the running request it came from) is never written through these.
        data = [(k[..., :cached, :], v[..., :cached, :]) for k, v in layers] if cached else None
        self.cache = transformers.DynamicCache(ddp_cache_data=data, config=lm.model.config)
        self.length = cached
        self.forwards = 0
        self._body = lm.model.get_decoder()
        self._head = lm.model.get_output_embeddings()
        self._dtype = lm.model.dtype  # of the tree masks; read once, not per forward

    def layers(self) -> list[tuple[Any, Any]]:
        return [(layer.keys, layer.values) for layer in self.cache.layers if layer.is_initialized]

    def prefill(self, tokens: Sequence[int]) -> Any:
        """Causal forward over ``tokens`` after the cache; returns the last position's logits."""
        return self.forward(tokens)[-1]

    def forward(self, tokens: Sequence[int], keep: int = 1) -> Any:
        """Causal forward over ``tokens`` after the cache; returns the last ``keep`` positions' logits ``(keep, V)``."""
        torch = self.torch
        with torch.inference_mode():
            out = self.lm.model(input_ids=torch.tensor([list(tokens)]), cache=self.cache, use_cache=True,
                                logits_to_keep=keep)
        self.length += len(tokens)
        self.forwards += 1
        return out.logits[0].float()

    def forward_tree(self, tree: TokenTree) -> Any:
        """One forward over every tree node after the cached prefix; returns the hidden states ``(T, H)``.

        A tree of just the root is run exactly as plain greedy decoding runs a
        step (no explicit mask or positions), so a plain pass stays plain.
        """
        if len(tree) == 1:
            return self.forward_hidden(tree.tokens)
        return self.forward_nodes(tree, 0, self.length)

    def forward_hidden(self, tokens: Sequence[int]) -> Any:
        """Causal forward over ``tokens`` after the cache; returns every position's hidden state ``(T, H)``.

        For callers that need the logits of some rows only (:meth:`logits`), such as a chain verification.
        """
        torch = self.torch
        with torch.inference_mode():
            out = self._body(input_ids=torch.tensor([list(tokens)]), cache=self.cache, use_cache=True)
        self.forwards += 1
        self.length += len(tokens)
        return out.last_hidden_state[0]

    def forward_nodes(self, tree: TokenTree, start: int, prefix: int) -> Any:
        """Forward tree nodes ``start:`` when the cache holds ``prefix`` tokens plus nodes ``:start``.

        A tree can so grow over several forwards (the sidecar decodes many
        branches in parallel this way); the cache keeps the node order.
        """
        torch = self.torch
        rows = slice(start, len(tree))
        dtype = self._dtype
        with torch.inference_mode():
            out = self._body(
                input_ids=torch.tensor([tree.tokens[rows]]), attention_mask=tree.attention_mask(prefix, dtype, rows),
                position_ids=tree.position_ids(prefix, rows), cache=self.cache, use_cache=True,
            )
        self.forwards += 1
        self.length += len(tree) - start
        return out.last_hidden_state[0]

    def logits(self, hidden: Any, rows: Sequence[int]) -> Any:
        """Logits ``(len(rows), V)`` of some tree rows, in one product with the output embedding.

        The output embedding is large (151,936 x 896 floats for Qwen2.5-0.5B, 544 MB): every product
        streams it from memory, so rows are computed together, not one by one.
        """
        torch = self.torch
        with torch.inference_mode():
            return self._head(hidden[list(rows)]).float()

    def keep(self, prefix: int, nodes: Sequence[int]) -> None:
        """Keep the first ``prefix`` cached tokens plus the tree ``nodes`` (indices after ``prefix``); drop the rest."""
        torch = self.torch
        nodes = list(nodes)
        contiguous = nodes == list(range(len(nodes)))
        index = None if contiguous else torch.tensor([prefix + n for n in nodes], dtype=torch.long)
        end = prefix + len(nodes)
        for layer in self.cache.layers:
            if not layer.is_initialized:
                continue
            if contiguous:
                layer.keys = layer.keys[..., :end, :]
                layer.values = layer.values[..., :end, :]
            else:
                layer.keys = torch.cat([layer.keys[..., :prefix, :], layer.keys.index_select(-2, index)], dim=-2)
                layer.values = torch.cat(
                    [layer.values[..., :prefix, :], layer.values.index_select(-2, index)], dim=-2
                )
        self.length = end
