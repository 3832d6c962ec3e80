"""How big a tree pays off: expected accepted tokens against the cost of a bigger forward.

On a GPU a forward over 64 tree nodes costs about as much as over one; on a
CPU it does not.  Measured here (Qwen2.5-Coder-1.5B, fp32, two threads, linear
layers packed for oneDNN and padded to 4 rows, see
:mod:`agentspec.engine.packed_linear`, attention without copying the cache,
see :mod:`agentspec.engine.grouped_attention`): forwards of 2-4 tokens cost
what one token costs, 8 tokens 1.1-1.35, 16 tokens 1.4-1.9, 32 tokens 2.3, 64
tokens 4 (with stock layers: 2.1 already at 2 tokens).  So the decoder does not
send every drafted node: it keeps the nodes that raise *expected tokens per
unit of forward time*.

* :class:`AcceptanceModel` learns, per draft source, how often a node is
  accepted when the target reaches its parent (a Beta prior plus counts).
  A node's probability of being accepted is the product along its path.
* :class:`ForwardCost` is the cost of a forward over ``T`` tokens relative to
  one token (piecewise linear through measured points;
  :func:`measure_cost` measures them on the machine at hand).
* :func:`prune` sorts nodes by acceptance probability and keeps the prefix
  that maximizes ``(1 + expected accepted) / cost(1 + nodes)``.
* A *unit* (a chain a drafter vouches for as a whole: a hint that has matched
  the output from its start) is one bet, not a run of independent tokens.
  Its node ``i`` is reached with probability ``q + (1 - q) * r_i``: ``q``,
  the chance the chain is right to its end (``<source>.whole``, learnt per
  source from every verified unit), plus, when it is not, the reach ``r_i``
  its nodes' own sources give.  Per-token products decay geometrically (0.9
  per token cuts a 30-token chain after about 10), so a right guess would
  take several forwards; as one bet it is kept whole while ``q`` is high, and
  a source whose guesses miss learns a low ``q`` and is cut as before.

Example with the default costs: a forced schema chain of 10 nodes (accepted
about every time) and 20 retrieval nodes accepted 10% of the time: the chain
is kept (about 11 tokens for 1.4 forwards' time), the retrieval nodes are
dropped (each adds 0.1 tokens for about 0.04 of a forward).
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentspec.decoding.drafter import Unit
from agentspec.engine.token_tree import TokenTree

__all__ = ["DEFAULT_COST", "AcceptanceModel", "ForwardCost", "measure_cost", "prune", "unit_nodes"]

# Beta(a, b) priors by source (or its prefix before the first dot), before any count is in.
# A ``<source>.rest`` tail (schema.choice.rest, hint.speculator.rest) takes _REST unless listed here.
_PRIORS = {"schema": (19.0, 1.0), "schema.choice": (1.0, 2.0), "schema.copy": (2.0, 2.0), "schema.bytes": (3.0, 1.0),
           "hint": (2.0, 2.0),
           "retrieval": (1.0, 3.0), "prompt_lookup": (1.0, 3.0), "recycling": (1.0, 4.0)}


@dataclass(frozen=True, slots=True)
class ForwardCost:
    """Cost of a forward over ``T`` tokens relative to a one-token forward (interpolated between points).

    >>> cost = ForwardCost((1, 2, 8), (1.0, 1.5, 2.0))
    >>> cost(1), cost(5), round(cost(16), 3)
    (1.0, 1.75, 2.667)
    """

    sizes: tuple[int, ...]
    costs: tuple[float, ...]

    def __call__(self, tokens: int) -> float:
        sizes, costs = self.sizes, self.costs
        if tokens <= sizes[0]:
            return costs[0]
        at = bisect.bisect_left(sizes, tokens)
        if at == len(sizes):  # beyond the last point: the last segment's slope
            at -= 1
        lo, hi = at - 1, at
        slope = (costs[hi] - costs[lo]) / (sizes[hi] - sizes[lo])
        return costs[lo] + slope * (tokens - sizes[lo])


DEFAULT_COST = ForwardCost((1, 2, 4, 8, 16, 32, 64), (1.0, 1.0, 1.02, 1.25, 1.6, 2.3, 4.0))
"""Measured on this project's CPU machines with packed layers (module docstring); :func:`measure_cost` for yours."""


def measure_cost(lm: Any, sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64), *, context: int = 256,
                 repeats: int = 3) -> ForwardCost:
    """Time tree forwards of ``sizes`` tokens after a ``context``-token prefix (median of ``repeats``)."""
    from agentspec.engine.kv_cache import TargetSequence

    seq = TargetSequence(lm)
    seq.prefill(list(range(100, 100 + context)))
    base = seq.length
    seconds = []
    for size in sizes:
        samples = []
        for _ in range(repeats + 1):  # the first run of a shape warms its kernels up
            tree = TokenTree(root=7, budget=size)
            tree.add_path(range(200, 199 + size), "calibration")
            began = time.perf_counter()
            seq.forward_tree(tree)
            samples.append(time.perf_counter() - began)
            seq.keep(base, [])
        seconds.append(statistics.median(samples[1:]))
    costs = [max(1.0, s / seconds[0]) for s in seconds]
    costs = [max(costs[: i + 1]) for i in range(len(costs))]  # noise must not make a bigger forward cheaper
    costs[0] = 1.0
    return ForwardCost(tuple(sizes), tuple(round(c, 3) for c in costs))


_REST = (9.0, 1.0)
"""The tail of a draft whose first token was right (``<source>.rest``): right as a rule."""

_WHOLE = (3.0, 1.0)
"""A unit right to its end (``<source>.whole``): a hint is a claim about the whole answer, and the guesses measured
here are mostly right (a same-family speculator named the authority's call 10 of 10 times, learned predictors
0.49-0.95 exact@1, DESIGN.md); the weight is small, so a source that misses is soon judged by its record."""


def _prior(source: str) -> tuple[float, float]:
    """The Beta prior of ``source``: its own, a ``.rest`` tail's or a ``.whole`` unit's, or its family's (the part
    before the first dot)."""
    if source in _PRIORS:
        return _PRIORS[source]
    if source.endswith(".rest"):
        return _REST
    if source.endswith(".whole"):
        return _WHOLE
    return _PRIORS.get(source.split(".")[0], (1.0, 3.0))


@dataclass
class AcceptanceModel:
    """Per-source acceptance of a node given its parent was accepted: Beta(prior) updated with counts."""

    tested: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    accepted: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def probability(self, source: str) -> float:
        a, b = _prior(source)
        return (a + self.accepted[source]) / (a + b + self.tested[source])

    def observe(self, source: str, accepted: bool) -> None:
        self.tested[source] += 1
        if accepted:
            self.accepted[source] += 1


def unit_nodes(tree: TokenTree, tokens: Iterable[int]) -> list[int]:
    """The nodes of ``tree`` along ``tokens`` from the root, as far as the tree holds them."""
    nodes, node = [], 0
    for token in tokens:
        child = tree.child(node, token)
        if child is None:
            break
        nodes.append(node := child)
    return nodes


def prune(tree: TokenTree, model: AcceptanceModel, cost: ForwardCost = DEFAULT_COST,
          units: Sequence[Unit] = ()) -> TokenTree:
    """The subtree of ``tree`` with the best expected tokens per unit of forward cost (module docstring).

    Each of ``units`` (token chains from the root) is judged as one bet (module docstring)::

        >>> tree = TokenTree(root=0)
        >>> tree.add_path(range(1, 31), "hint.speculator.rest")
        30
        >>> unit = Unit("hint.speculator.whole", tuple(range(1, 31)))
        >>> prune(tree, AcceptanceModel()).drafts, prune(tree, AcceptanceModel(), units=[unit]).drafts
        (14, 30)
    """
    if tree.drafts == 0:
        return tree
    reach = [1.0] * len(tree)
    for node in range(1, len(tree)):
        reach[node] = reach[tree.parents[node]] * model.probability(tree.sources[node])
    # A unit node is reached when the unit is right, or else as its own sources say.  A node off a unit keeps the
    # reach its sources give: a right unit makes it no likelier.
    boosted = list(reach)
    for unit in units:
        whole = model.probability(unit.source)
        for node in unit_nodes(tree, unit.tokens):
            boosted[node] = max(boosted[node], whole + (1.0 - whole) * reach[node])
    reach = boosted
    # A child is never likelier than its parent, so this order keeps every parent before its children.
    order = sorted(range(1, len(tree)), key=lambda n: (-reach[n], tree.depths[n], n))
    best_k, best_rate, expected = 0, 1.0, 1.0
    for k, node in enumerate(order, 1):
        expected += reach[node]
        rate = expected / cost(1 + k)
        if rate > best_rate:
            best_k, best_rate = k, rate
    if best_k == len(order):
        return tree
    return tree.subtree([0, *order[:best_k]])
