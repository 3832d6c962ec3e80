"""Verify a token tree with one forward of the target model; keep only the accepted path.

:class:`~agentspec.engine.kv_cache.TargetSequence` holds one request's KV
cache.  The cache covers every committed token but the last one, the
*pending* token, which is the root of the next tree.  :meth:`Verifier.verify` runs one forward over the tree (the
prefix in the cache, an additive 4D mask, position ids = prefix + depth),
then walks it greedily: from the root, take the target's greedy token; if
the tree has a child with that token, accept it and continue from the child,
otherwise that token is the *bonus* and the walk ends.  So every forward
commits at least one token, and the committed tokens are exactly the ones
plain greedy decoding chooses.  Only the accepted path's key/values stay in
the cache (a gather along the sequence axis, or a crop for a chain).

Greedy means :class:`~agentspec.engine.greedy.GreedyChooser`'s choice (the
argmax over the tokens a grammar allows, stop tokens ending the generation),
the same chooser the server's plain path uses.

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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentspec.engine.greedy import NEAR_TIE, Choice, GreedyChooser
from agentspec.engine.kv_cache import TargetSequence
from agentspec.engine.token_tree import TokenTree

__all__ = ["NearTie", "Verdict", "Verifier"]


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
