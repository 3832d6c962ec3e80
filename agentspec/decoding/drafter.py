"""The one drafter protocol: ``propose(state, budget) -> TokenTree``.

Every source of draft tokens (the schema grammar, retrieval of earlier
calls, token recycling, external hints) implements :class:`Drafter`.  The
decoder calls each drafter with the same :class:`DraftState` and merges
the trees they return into one tree for the verifier; it never asks which
kind of drafter it holds.  A drafter returns tokens, not statistics: which
drafter a committed token came from is read off the tree's node sources
(:mod:`agentspec.decoding.stats` counts them).

A worked example: a drafter that always proposes the tokens of ``", "``
after a digit::

    class CommaDrafter:
        name = "comma"

        def propose(self, state: DraftState, budget: int) -> TokenTree:
            tree = TokenTree(root=state.output[-1], budget=budget)
            if state.text[-1:].isdigit():
                for tokens in state.continuations(", "):
                    tree.add_path(tokens, source=self.name)
            return tree

With the output ``... "base": 10`` (the last token ``0``), it returns the tree
``0 -> ","  -> " "`` (or ``0 -> ", "`` where the vocabulary merges them; the
canonical tokenization in context decides); the verifier then accepts
``, `` in one forward if the target would have written it.

Per-request data a drafter derives once (an index of the prompt, a grammar
clone) goes in ``state.request.memo[drafter.name]``; it lives and dies with
the request.

A drafter that proposes a chain it vouches for as a whole (a hint that has
matched the output from its start: right to its end or wrong somewhere)
also declares it in ``state.units`` as a :class:`Unit`; the decoder gives
units the tree budget first, and its pruner judges each as one bet (right
as a whole, learned per source) rather than token by token.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentspec.decoding.suffix_index import SuffixAutomaton
from agentspec.engine.model import LocalModel
from agentspec.engine.token_tree import TokenTree

__all__ = [
    "DraftRequest", "DraftState", "Drafter", "Hint", "HintBox", "MAX_BOX_BYTES", "MAX_BOX_HINTS", "Unit", "text_bytes",
    "tokens_in_context",
]


@runtime_checkable
class Drafter(Protocol):
    """A source of draft tokens (module docstring)."""

    name: str

    def propose(self, state: DraftState, budget: int) -> TokenTree:
        """Draft continuations of ``state.output`` as a tree rooted at ``state.output[-1]``, at most ``budget`` nodes."""
        ...


@dataclass(frozen=True, slots=True)
class Hint:
    """An external prediction of the completion text (a sidecar's rendered call, a probe's tokens).

    ``index`` is the text's suffix automaton (the hint drafter realigns on it once the output leaves the hint);
    :meth:`indexed` builds it when the hint is made, in the thread that puts it, never in a decoding step.
    """

    text: str
    source: str
    index: SuffixAutomaton | None = field(default=None, compare=False, repr=False)

    @classmethod
    def indexed(cls, text: str, source: str) -> Hint:
        """The hint with its suffix automaton built (linear in the text, but Python: about 1 s per 400 kB)."""
        index = SuffixAutomaton()
        index.add(text)
        return cls(text, source, index)

    @property
    def nbytes(self) -> int:
        """The text's size in UTF-8 (what the box's byte budget counts)."""
        return text_bytes(self.text)


def text_bytes(text: str) -> int:
    """``text``'s size in UTF-8, as hint bounds count it."""
    return len(text.encode("utf-8", "surrogatepass"))


MAX_BOX_HINTS = 32
"""Hints one request's box takes over its life (client hints, deliveries, probes, sidecar guesses together):
every draft tree reads each of them, so their number bounds the drafting work of every step."""

MAX_BOX_BYTES = 256 * 1024
"""Text all hints of one request's box hold together (UTF-8 bytes)."""


class HintBox:
    """Hints for one request, put from any thread at any time; drafters read a snapshot and never wait.

    The box is bounded (``max_hints``, ``max_bytes``): a hint that would pass either is not taken
    (:meth:`put` says so), so a client's hints cost only drafting work of bounded size.

    >>> box = HintBox()
    >>> box.put('{"name": "get_weather"', source="hint.client")
    True
    >>> [hint.text for hint in box.snapshot()]
    ['{"name": "get_weather"']
    """

    def __init__(self, hints: Sequence[Hint] = (), *, max_hints: int = MAX_BOX_HINTS,
                 max_bytes: int = MAX_BOX_BYTES) -> None:
        self._lock = threading.Lock()
        self._hints: list[Hint] = list(hints)
        self._bytes = sum(hint.nbytes for hint in self._hints)
        self.max_hints = max_hints
        self.max_bytes = max_bytes
        self.version = len(self._hints)

    def put(self, text: str, source: str = "hint") -> bool:
        """Add a hint (its index is built here, in the caller's thread); whether the box took it."""
        if not text or not self.fits(1, text_bytes(text)):
            return False  # refused before indexing: a full box costs its callers nothing
        return self.put_all([Hint.indexed(text, source)])

    def fits(self, count: int, nbytes: int) -> bool:
        """Whether ``count`` more hints of ``nbytes`` together are within the bounds now (check it before indexing
        them: :meth:`put_all` checks again, as others may put in between)."""
        with self._lock:
            return len(self._hints) + count <= self.max_hints and self._bytes + nbytes <= self.max_bytes

    def put_all(self, hints: Sequence[Hint]) -> bool:
        """Add every one of ``hints``, or none when together they would pass the box's bounds."""
        added = sum(hint.nbytes for hint in hints)
        with self._lock:
            if len(self._hints) + len(hints) > self.max_hints or self._bytes + added > self.max_bytes:
                return False
            self._hints.extend(hints)
            self._bytes += added
            self.version += len(hints)
        return True

    @property
    def size(self) -> tuple[int, int]:
        """The hints held and their bytes."""
        with self._lock:
            return len(self._hints), self._bytes

    def snapshot(self) -> tuple[Hint, ...]:
        with self._lock:
            return tuple(self._hints)


@dataclass(eq=False)
class DraftRequest:
    """What a request gives every drafter: prompt, tools, grammar, hints; fixed for the request's life."""

    lm: LocalModel
    prompt: tuple[int, ...]
    tools: tuple[dict[str, Any], ...] = ()
    """OpenAI function definitions: ``{"name", "description", "parameters"}``."""
    grammar: str | None = None
    """The llguidance grammar the output follows (None: unconstrained)."""
    hints: HintBox = field(default_factory=HintBox)
    memo: dict[str, Any] = field(default_factory=dict)
    question: str = ""
    """The last user message (arguments are often copied from it); empty when unknown."""

    @property
    def prompt_text(self) -> str:
        text = self.memo.get("_prompt_text")
        if text is None:
            text = b"".join(self.lm.token_bytes(t) for t in self.prompt).decode("utf-8", "replace")
            self.memo["_prompt_text"] = text
        return text


@dataclass(frozen=True, slots=True)
class Unit:
    """A drafted chain from the root that is right as a whole or wrong somewhere (module docstring).

    ``source`` keys the acceptance of the whole chain (``hint.speculator.whole``); ``tokens`` continue the output.
    """

    source: str
    tokens: tuple[int, ...]


@dataclass(eq=False)
class DraftState:
    """The committed output so far; ``output[-1]`` is the pending token every tree is rooted at."""

    request: DraftRequest
    output: list[int]
    matcher: Any = None
    """The grammar state after ``output`` (llguidance ``LLMatcher``); drafters ``deep_copy`` it, never consume."""
    successors: dict[int, list[int]] = field(default_factory=dict)
    """Token recycling: the target's top next tokens after each token, from earlier forwards."""
    units: list[Unit] = field(default_factory=list)
    """The chains drafters vouch for as a whole in the tree being built (the decoder clears it every step)."""
    _bytes: bytearray = field(default_factory=bytearray)
    _counted: int = 0

    @property
    def lm(self) -> LocalModel:
        return self.request.lm

    @property
    def text(self) -> str:
        """The output decoded (an incomplete UTF-8 tail is left out)."""
        while self._counted < len(self.output):
            self._bytes += self.lm.token_bytes(self.output[self._counted])
            self._counted += 1
        return bytes(self._bytes).decode("utf-8", "ignore")

    def continuations(self, text: str, tail: int = 4) -> list[list[int]]:
        """The canonical token ids of ``text`` written after the output (see :func:`tokens_in_context`)."""
        return tokens_in_context(self.lm, self.output, text, tail=tail)


def tokens_in_context(lm: LocalModel, output: Sequence[int], text: str, *, tail: int = 4) -> list[list[int]]:
    """Canonical tokenizations of ``text`` continuing ``output``: the tokens after the output's tail.

    The last ``tail`` committed tokens are re-tokenized together with
    ``text``: when the tokenizer keeps their boundary, the tokens after them
    are what the model writes canonically.  When the boundary merges (the
    output ends in ``"`` and the text starts with ``,`` where ``",`` is one
    token), the model cannot take the merged token any more; the text's own
    tokenization is returned instead.
    """
    if not text:
        return []
    ids = list(output[-tail:])
    try:
        head = b"".join(lm.token_bytes(t) for t in ids).decode("utf-8")
    except UnicodeDecodeError:
        return [lm.encode(text)]
    full = lm.encode(head + text)
    if full[: len(ids)] == ids and len(full) > len(ids):
        return [full[len(ids) :]]
    return [lm.encode(text)]
