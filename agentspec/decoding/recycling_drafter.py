"""Fallback drafts from the context: prompt lookup and token recycling.

Two cheap sources that need no model and no schema:

* **prompt lookup** (PLD): find the last ``n`` output tokens (``n`` from
  ``max_ngram`` down to 1) earlier in prompt + output, most recent occurrence
  first, and draft the ``k`` tokens that followed it;
* **token recycling**: the target's own top-``w`` next tokens after each token
  it has computed logits for (the verifier reports every row it reads, kept in
  ``state.successors``) form an adjacency table; a tree is grown from the
  pending token by following it breadth-first (wide near the root, narrow
  deeper).

With both off it proposes nothing; ``RecyclingDrafter(recycle=False)`` is the
prompt-lookup decoding baseline of ``experiments/bfcl_speed.py``.

Example (prompt lookup, ``max_ngram=3``): context ``... a b c d e ... a b``
with output ending ``a b`` drafts ``c d e ...``.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentspec.decoding.drafter import DraftState
from agentspec.engine.token_tree import TokenTree

__all__ = ["RecyclingDrafter", "prompt_lookup"]


def prompt_lookup(context: Sequence[int], *, max_ngram: int = 3, min_ngram: int = 1, k: int = 10) -> list[int]:
    """The ``k`` tokens that followed the latest earlier occurrence of the context's last n-gram.

    >>> prompt_lookup([1, 2, 3, 4, 5, 9, 1, 2], k=3)
    [3, 4, 5]
    """
    return _lookup(context, max_ngram, min_ngram, k)[1]


def _lookup(context: Sequence[int], max_ngram: int, min_ngram: int, k: int) -> tuple[int, list[int]]:
    """(matched n-gram length, continuation) of prompt lookup; (0, []) when nothing matches."""
    n_ctx = len(context)
    for n in range(min(max_ngram, n_ctx - 1), min_ngram - 1, -1):
        tail = list(context[n_ctx - n :])
        for start in range(n_ctx - n - 1, -1, -1):
            if list(context[start : start + n]) == tail:
                follow = list(context[start + n : start + n + k])
                if follow:
                    return n, follow
    return 0, []


class RecyclingDrafter:
    """Prompt lookup and token recycling (module docstring)."""

    name = "recycling"

    def __init__(
        self, *, prompt_lookup: bool = True, recycle: bool = True, max_ngram: int = 3, k: int = 10,
        widths: Sequence[int] = (4, 2, 2, 1, 1, 1), recycle_budget: int = 16, window: int = 4096,
    ) -> None:
        self.lookup = prompt_lookup
        self.recycle = recycle
        self.max_ngram = max_ngram
        self.k = k
        self.widths = tuple(widths)
        self.recycle_budget = recycle_budget
        self.window = window

    def propose(self, state: DraftState, budget: int) -> TokenTree:
        tree = TokenTree(root=state.output[-1], budget=budget)
        if self.lookup:
            context = [*state.request.prompt[-self.window :], *state.output]
            matched, follow = _lookup(context, self.max_ngram, 1, self.k)
            # Labelled by match length: a 3-gram match is far likelier right than a 1-gram one, and the
            # decoder's acceptance model learns each rate apart.
            tree.add_path(follow, f"prompt_lookup.{matched}")
        if self.recycle and state.successors:
            self._recycle(state, tree)
        return tree

    def _recycle(self, state: DraftState, tree: TokenTree) -> None:
        added = 0
        frontier = [0]
        for width in self.widths:
            nxt = []
            for node in frontier:
                for token in state.successors.get(tree.tokens[node], [])[:width]:
                    if added >= self.recycle_budget or tree.room <= 0:
                        return
                    before = len(tree)
                    child = tree.add(node, token, "recycling")
                    if child is None:
                        return
                    added += len(tree) - before
                    nxt.append(child)
            frontier = nxt
