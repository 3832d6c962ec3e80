"""A character suffix automaton: where does the end of the output occur in earlier text, and what followed it?

Documents are appended online (:meth:`SuffixAutomaton.add`); a
:class:`Matcher` follows a growing query text one character at a time and
always knows the longest suffix of the query that occurs in the documents.
:meth:`SuffixAutomaton.continuations` then reads what followed that suffix
(and, for different continuations, what followed shorter suffixes)::

    >>> index = SuffixAutomaton()
    >>> index.add('{"name": "get_weather", "arguments": {"city": "Paris"}}')
    >>> matcher = index.matcher()
    >>> matcher.feed('{"name": "get_weather", "arguments": {"ci')
    >>> matcher.length
    41
    >>> index.continuations(matcher, max_chars=12)
    ['ty": "Paris"']

Building is linear in the text; following the query is amortized constant
per character.  Documents are separated by a character that never matches,
so a continuation never runs into the next document.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Matcher", "SuffixAutomaton"]

_SEPARATOR = "\x00"


class SuffixAutomaton:
    """The suffix automaton of the concatenated documents (module docstring)."""

    def __init__(self) -> None:
        self.next: list[dict[str, int]] = [{}]
        self.link: list[int] = [-1]
        self.length: list[int] = [0]
        self.end: list[int] = [-1]
        """One end position (index of the last character) of the strings each state stands for."""
        self.text: list[str] = []
        self._last = 0
        self.version = 0

    def add(self, document: str) -> None:
        """Append a document (the separator is added after it)."""
        for ch in document.replace(_SEPARATOR, " ") + _SEPARATOR:
            self._extend(ch)
        self.version += 1

    def _extend(self, ch: str) -> None:
        position = len(self.text)
        self.text.append(ch)
        cur = len(self.next)
        self.next.append({})
        self.length.append(self.length[self._last] + 1)
        self.link.append(0)
        self.end.append(position)
        p = self._last
        while p != -1 and ch not in self.next[p]:
            self.next[p][ch] = cur
            p = self.link[p]
        if p != -1:
            q = self.next[p][ch]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                clone = len(self.next)
                self.next.append(dict(self.next[q]))
                self.length.append(self.length[p] + 1)
                self.link.append(self.link[q])
                self.end.append(self.end[q])
                while p != -1 and self.next[p].get(ch) == q:
                    self.next[p][ch] = clone
                    p = self.link[p]
                self.link[q] = clone
                self.link[cur] = clone
        self._last = cur

    def matcher(self) -> Matcher:
        return Matcher(self)

    def continuations(self, matcher: Matcher, *, max_chars: int, min_match: int = 1, limit: int = 1) -> list[str]:
        """Up to ``limit`` distinct texts that followed the query's matched suffix (longest matches first).

        Shorter suffixes (suffix links) can end elsewhere and so offer other
        continuations; none shorter than ``min_match`` characters is used.
        """
        out: list[str] = []
        state, length = matcher.state, matcher.length
        while state > 0 and length >= min_match and len(out) < limit:
            start = self.end[state] + 1
            piece = "".join(self.text[start : start + max_chars]).split(_SEPARATOR, 1)[0]
            if piece and piece not in out:
                out.append(piece)
            state = self.link[state]
            length = self.length[state]
        return out


@dataclass
class Matcher:
    """The longest suffix of a growing query that occurs in an automaton's documents."""

    index: SuffixAutomaton
    state: int = 0
    length: int = 0
    fed: int = 0
    """Characters of the query read so far."""

    def feed(self, text: str) -> None:
        nxt, link, lengths = self.index.next, self.index.link, self.index.length
        for ch in text:
            while self.state and ch not in nxt[self.state]:
                self.state = link[self.state]
                self.length = lengths[self.state]
            if ch in nxt[self.state]:
                self.state = nxt[self.state][ch]
                self.length += 1
            self.fed += 1

    def follow(self, query: str) -> None:
        """Read the part of ``query`` not read yet (``query`` must extend what was fed)."""
        if len(query) > self.fed:
            self.feed(query[self.fed :])
