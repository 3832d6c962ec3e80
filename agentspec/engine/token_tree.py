"""A tree of draft tokens: what one verification forward of the target model checks.

Node 0 is the *root*: the last committed token, whose key/values are not in
the cache yet (the verifier computes it together with the drafts).  Every
other node is a draft token with a parent link; a path from the root is one
candidate continuation.  Paths sharing a prefix share nodes, so a tree of 64
nodes can hold many branches.  Nodes are appended after their parent, so a
node's index is always larger than its parent's: the order is a valid
topological order for the forward pass and for the cache.

For the forward pass the tree becomes a 4D *additive* attention mask (0 where
a node may attend, the dtype's minimum elsewhere; a boolean mask is silently
wrong under eager attention) and explicit position ids (prefix length plus
depth)::

    >>> tree = TokenTree(root=5, budget=8)
    >>> tree.add_path([7, 8], source="schema")    # root -> 7 -> 8
    2
    >>> tree.add_path([7, 9], source="retrieval")  # shares node 7, adds 9
    1
    >>> tree.tokens, tree.parents, tree.depths
    ([5, 7, 8, 9], [-1, 0, 1, 1], [0, 1, 2, 2])
    >>> tree.ancestors_matrix().astype(int).tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["DEFAULT_BUDGET", "TokenTree"]

DEFAULT_BUDGET = 64
"""Draft nodes per tree (the root not counted); DESIGN.md asks for 64-80."""


@dataclass
class TokenTree:
    """Draft tokens under one root; ``budget`` caps the draft nodes (the root is free)."""

    root: int
    budget: int = DEFAULT_BUDGET
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    """Which drafter proposed each node first (the root's is ``"root"``)."""
    children: list[list[int]] = field(default_factory=list, repr=False)
    """Each node's children in the order they were added (the first is the drafter's first choice)."""
    _children: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.tokens:
            self.tokens, self.parents, self.depths, self.sources = [self.root], [-1], [0], ["root"]
            self.children = [[]]

    def __len__(self) -> int:
        """Nodes including the root: the length of the verification forward."""
        return len(self.tokens)

    @property
    def drafts(self) -> int:
        """Draft nodes (the root not counted)."""
        return len(self.tokens) - 1

    @property
    def room(self) -> int:
        return self.budget - self.drafts

    def child(self, node: int, token: int) -> int | None:
        """The child of ``node`` carrying ``token``, if the tree has one."""
        return self._children.get((node, token))

    def add(self, parent: int, token: int, source: str) -> int | None:
        """The node for ``token`` under ``parent`` (an existing one is reused); None when the budget is spent."""
        existing = self._children.get((parent, token))
        if existing is not None:
            return existing
        if self.room <= 0:
            return None
        node = len(self.tokens)
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.sources.append(source)
        self.children.append([])
        self.children[parent].append(node)
        self._children[(parent, token)] = node
        return node

    def add_path(self, tokens: Iterable[int], source: str, parent: int = 0) -> int:
        """Add ``tokens`` as a chain under ``parent``; return how many new nodes it took (stops at the budget)."""
        added = 0
        node = parent
        for token in tokens:
            before = len(self.tokens)
            child = self.add(node, int(token), source)
            if child is None:
                break
            node = child
            added += len(self.tokens) - before
        return added

    def merge(self, other: TokenTree, parent: int = 0) -> int:
        """Copy ``other``'s drafts (same root token) under ``parent``, keeping their sources; return nodes added.

        Nodes are taken breadth-first, so when the budget runs out the shallow
        (likelier) drafts of ``other`` are the ones kept.
        """
        mapping = {0: parent}
        added = 0
        for node in sorted(range(1, len(other.tokens)), key=lambda n: (other.depths[n], n)):
            target_parent = mapping.get(other.parents[node])
            if target_parent is None:
                continue
            before = len(self.tokens)
            mapped = self.add(target_parent, other.tokens[node], other.sources[node])
            if mapped is None:
                break
            mapping[node] = mapped
            added += len(self.tokens) - before
        return added

    def path(self, node: int) -> list[int]:
        """Node indices from the root to ``node``, both included."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def path_tokens(self, node: int) -> list[int]:
        """The draft tokens from the root (excluded) to ``node`` (included)."""
        return [self.tokens[n] for n in self.path(node)[1:]]

    def leaves(self) -> list[int]:
        return [node for node in range(len(self.tokens)) if not self.children[node]]

    def first_chain(self, node: int) -> list[int]:
        """``node`` and its first descendants (first child, its first child, ...): the drafters' best guess."""
        chain = [node]
        while self.children[chain[-1]]:
            chain.append(self.children[chain[-1]][0])
        return chain

    def subtree(self, keep: list[int]) -> TokenTree:
        """A new tree of the nodes ``keep`` (every kept node's parent must be kept; the root always is)."""
        out = TokenTree(root=self.root, budget=self.budget)
        mapping = {0: 0}
        for node in sorted(set(keep) - {0}, key=lambda n: (self.depths[n], n)):
            parent = mapping.get(self.parents[node])
            if parent is None:
                continue
            added = out.add(parent, self.tokens[node], self.sources[node])
            if added is not None:
                mapping[node] = added
        return out

    def ancestors_matrix(self) -> np.ndarray:
        """``A[i, j]`` is True when node ``j`` is ``i`` or one of its ancestors (what ``i`` may attend to)."""
        size = len(self.tokens)
        seen = np.zeros((size, size), dtype=bool)
        for node in range(size):
            parent = self.parents[node]
            if parent >= 0:
                seen[node] = seen[parent]
            seen[node, node] = True
        return seen

    def attention_mask(self, prefix_len: int, dtype: Any = None, rows: slice | None = None) -> Any:
        """The additive float mask ``(1, 1, T, prefix_len + T)`` for a forward over the whole tree.

        ``rows`` keeps only some query rows (nodes ``rows.start`` to
        ``rows.stop``), for a forward of just those nodes after the earlier
        ones are already cached: the mask then covers ``prefix_len +
        rows.stop`` keys.
        """
        torch = _torch()
        dtype = dtype or torch.float32
        seen = self.ancestors_matrix()
        if rows is not None:
            seen = seen[rows, : rows.stop]
        allowed = np.concatenate([np.ones((seen.shape[0], prefix_len), dtype=bool), seen], axis=1)
        mask = torch.zeros(allowed.shape, dtype=dtype)
        mask.masked_fill_(torch.from_numpy(~allowed), torch.finfo(dtype).min)
        return mask[None, None]

    def position_ids(self, prefix_len: int, rows: slice | None = None) -> Any:
        """``(1, T)`` position ids: ``prefix_len + depth`` (siblings share a position)."""
        torch = _torch()
        depths = self.depths[rows] if rows is not None else self.depths
        return (torch.tensor(depths, dtype=torch.long) + prefix_len)[None]

    @classmethod
    def chain(cls, root: int, tokens: Sequence[int], source: str, budget: int = DEFAULT_BUDGET) -> TokenTree:
        """A tree holding one path."""
        tree = cls(root=root, budget=budget)
        tree.add_path(tokens, source)
        return tree


def _torch() -> Any:
    from agentspec.engine.model import require

    return require("torch")
