"""Verify a token tree with one forward of the target model; keep only the accepted path.

:class:`TargetSequence` owns one request's KV cache.  The cache covers every
committed token but the last one, the *pending* token, which is the root of
the next tree.  :meth:`Verifier.verify` runs one forward over the tree (the
prefix in the cache, an additive 4D mask, position ids = prefix + depth),
then walks it greedily: from the root, take the target's greedy token; if
the tree has a child with that token, accept it and continue from the child,
otherwise that token is the *bonus* and the walk ends.  So every forward
commits at least one token, and the committed tokens are exactly the ones
plain greedy decoding chooses.  Only the accepted path's key/values stay in
the cache (a gather along the sequence axis, or a crop for a chain).

Greedy means the argmax over the tokens a grammar allows (when the request
has one), with stop tokens ending the generation, as
:class:`agentspec.serve.engine.Engine` does.

Floating point: the tree forward computes the same logits as a one-token
forward only up to rounding (measured here: at most about 6e-5 in fp32 on
CPU).  Where the top two allowed logits are closer than ``near_tie``
(default 1e-3), the choice could flip between a tree pass and a plain pass.
Every such choice is reported as a :class:`NearTie` with its margin, and
with ``recheck=True`` (the default) it is never decided by a tree pass: the
walk stops before it and the next forward is a plain one-token pass (the
same call as plain greedy decoding) that decides it.  The remaining source
of difference (key/values of earlier tokens computed in tree passes) is
smaller still; tests and ``experiments/bfcl_speed.py`` compare with plain
greedy token for token and report any divergence with its margin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentspec.decoding.token_tree import TokenTree
from agentspec.models.local import LocalModel, require

__all__ = ["Choice", "GreedyChooser", "NearTie", "TargetSequence", "Verdict", "Verifier"]

NEAR_TIE = 1e-3
"""Logit margin under which a greedy choice counts as a near tie (about 20x the rounding seen here)."""


@dataclass(frozen=True, slots=True)
class Choice:
    """One greedy decision: the token, its log probability (before any grammar mask), the margin to the runner-up."""

    token: int
    logprob: float
    margin: float
    runner_up: int
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class NearTie:
    """A greedy choice whose top-2 logit margin was under the threshold."""

    position: int
    """Index of the decided token in the generated output."""
    token: int
    runner_up: int
    margin: float
    plain: bool
    """Decided by a plain one-token pass (as plain greedy decoding does), not a tree pass."""


@dataclass
class Verdict:
    """What one verification committed."""

    tokens: list[int] = field(default_factory=list)
    choices: list[Choice] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    """Per committed token: the drafter whose node it was, or ``"bonus"`` for the target's own token."""
    finish: str | None = None
    near_ties: list[NearTie] = field(default_factory=list)
    drafted: int = 0
    tree_size: int = 1
    recheck: bool = False
    """A near tie stopped the walk: the next forward must be a plain one-token pass."""
    tested: list[tuple[str, bool]] = field(default_factory=list)
    """Per draft node whose parent was accepted: its source and whether it was accepted too."""


class GreedyChooser:
    """Greedy choice with an optional llguidance matcher (consumed as tokens are committed) and stop tokens.

    ``matcher`` is the request's live grammar state (or None); the chooser
    consumes every committed token into it.
    """

    def __init__(
        self, stop_ids: frozenset[int], *, matcher: Any = None, vocab_size: int, ignore_eos: bool = False,
        top_logprobs: int = 0,
    ) -> None:
        self.torch = require("torch")
        self.stop_ids = stop_ids
        self.matcher = matcher
        self.vocab_size = vocab_size
        self.ignore_eos = ignore_eos
        self.top_logprobs = top_logprobs
        self._stops = sorted(stop_ids)

    def _bits(self) -> np.ndarray:
        # The grammar's token mask, exactly what constrained plain greedy applies.  (validate_tokens() is
        # laxer: where bytes are forced, the mask allows only their canonical first token, e.g. '"' and not
        # '"}' before '}}'; accepting by validate_tokens would diverge from plain greedy.)
        return np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8)

    def _allowed(self, token: int, bits: np.ndarray | None) -> bool:
        if token in self.stop_ids and self.ignore_eos:
            return False
        if bits is None:
            return True
        return bool((bits[token >> 3] >> (token & 7)) & 1)

    def _masked(self, logits: Any, bits: np.ndarray | None) -> Any:
        torch = self.torch
        masked = logits.clone()
        if bits is not None:
            allowed = np.unpackbits(bits, bitorder="little")[: logits.shape[-1]].astype(bool)
            masked[torch.from_numpy(~allowed)] = float("-inf")
        if self.ignore_eos and self._stops:
            masked[self._stops] = float("-inf")
        return masked

    def choose(self, logits: Any, near_tie: float) -> Choice:
        """The greedy token for this row of logits (1D, full vocabulary)."""
        torch = self.torch
        bits = self._bits() if self.matcher is not None else None
        values, ids = torch.topk(logits, 2)
        raw, second = int(ids[0]), int(ids[1])
        margin = float(values[0] - values[1])
        if self._allowed(raw, bits):
            token = raw
            if margin < near_tie and not self._allowed(second, bits):
                # The raw runner-up is not a legal choice: measure against the best legal one.
                values, ids = torch.topk(self._masked(logits, bits), 2)
                second, margin = int(ids[1]), float(values[0] - values[1])
        else:
            values, ids = torch.topk(self._masked(logits, bits), 2)
            token, second, margin = int(ids[0]), int(ids[1]), float(values[0] - values[1])
        logprobs = None
        lse = torch.logsumexp(logits, dim=-1)
        top: tuple[tuple[int, float], ...] = ()
        if self.top_logprobs:
            logprobs = logits - lse
            tv, ti = torch.topk(logprobs, self.top_logprobs)
            top = tuple(zip(ti.tolist(), tv.tolist()))
        return Choice(token=token, logprob=float(logits[token] - lse), margin=margin, runner_up=second, top=top)

    def is_stop(self, token: int) -> bool:
        return token in self.stop_ids and not self.ignore_eos

    def commit(self, token: int) -> bool:
        """Consume ``token`` into the grammar; True when the grammar is now complete."""
        if self.matcher is None:
            return False
        if not self.matcher.consume_tokens([token]):
            raise RuntimeError(f"the grammar rejected token {token}: {self.matcher.get_error()}")
        return bool(self.matcher.is_stopped())


class TargetSequence:
    """One request's KV cache on the target model; ``length`` tokens are cached (all committed but the pending one)."""

    def __init__(self, lm: LocalModel, reuse: tuple[int, list[tuple[Any, Any]]] = (0, [])) -> None:
        self.torch = require("torch")
        transformers = require("transformers")
        self.lm = lm
        cached, layers = reuse
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
        torch = self.torch
        with torch.inference_mode():
            out = self.lm.model(input_ids=torch.tensor([list(tokens)]), cache=self.cache, use_cache=True,
                                logits_to_keep=1)
        self.length += len(tokens)
        self.forwards += 1
        return out.logits[0, -1].float()

    def forward_tree(self, tree: TokenTree) -> Any:
        """One forward over every tree node after the cached prefix; returns the hidden states ``(T, H)``.

        A tree of just the root is run exactly as plain greedy decoding runs a
        step (no explicit mask or positions), so a plain pass stays plain.
        """
        if len(tree) == 1:
            torch = self.torch
            with torch.inference_mode():
                out = self._body(input_ids=torch.tensor([tree.tokens]), cache=self.cache, use_cache=True)
            self.forwards += 1
            self.length += 1
            return out.last_hidden_state[0]
        return self.forward_nodes(tree, 0, self.length)

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


class Verifier:
    """Greedy tree verification over a :class:`TargetSequence` (module docstring)."""

    def __init__(self, *, near_tie: float = NEAR_TIE, recheck: bool = True) -> None:
        self.near_tie = near_tie
        self.recheck = recheck

    def verify(
        self, seq: TargetSequence, tree: TokenTree, chooser: GreedyChooser, *, position: int, max_new: int,
        on_logits: Callable[[int, Any], None] | None = None,
    ) -> Verdict:
        """Run ``tree`` (rooted at the pending token) and commit the greedy path; ``position`` = tokens generated.

        ``max_new`` bounds the tokens this call may commit (the request's
        remaining ``max_tokens``).  ``on_logits(token, logits)`` sees each
        row the walk computes (the token-recycling drafter learns from them).
        """
        prefix = seq.length
        hidden = seq.forward_tree(tree)
        plain = len(tree) == 1
        verdict = Verdict(drafted=tree.drafts, tree_size=len(tree))
        node, kept = 0, [0]
        rows: dict[int, Any] = {}
        while True:
            if node not in rows:
                # The walk usually follows the drafters' first choices: compute that whole chain at once.
                chain = tree.first_chain(node)
                rows.update(zip(chain, seq.logits(hidden, chain)))
            logits = rows[node]
            if on_logits is not None:
                on_logits(tree.tokens[node], logits)
            choice = chooser.choose(logits, self.near_tie)
            tie = choice.margin < self.near_tie
            if tie and self.recheck and not plain:
                # Decide this one in a plain pass: drop this node's key/values and make it the pending token.
                kept.pop()
                verdict.recheck = True
                break
            if tie:
                verdict.near_ties.append(NearTie(position + len(verdict.tokens), choice.token, choice.runner_up,
                                                 choice.margin, plain))
            if chooser.is_stop(choice.token):
                verdict.finish = "stop"
                break
            child = tree.child(node, choice.token)
            verdict.tested.extend((tree.sources[c], c == child) for c in tree.children[node])
            verdict.tokens.append(choice.token)
            verdict.choices.append(choice)
            verdict.sources.append(tree.sources[child] if child is not None else "bonus")
            done = chooser.commit(choice.token)
            if done:
                verdict.finish = "stop"
            elif len(verdict.tokens) >= max_new:
                verdict.finish = "length"
            if child is None or verdict.finish is not None:
                break
            node = child
            kept.append(node)
        seq.keep(prefix, kept)
        return verdict
