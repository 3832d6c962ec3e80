"""Tokens to text while generating: UTF-8 across token boundaries, stop strings, tool-call hold-back.

:class:`TextAssembler` turns token bytes into text and ends the text at the
first stop string; :meth:`TextAssembler.feed` returns only text that can no
longer become part of a stop string, so streamed text never shows a stop::

    >>> text = TextAssembler(["END"])
    >>> text.feed(b"Hello E"), text.feed(b"ND more"), text.stopped, text.text
    ('Hello ', '', True, 'Hello ')

:class:`ToolCallHoldback` decides, while streaming with tools, which text is
plain content and which may be a tool call (held until the end and parsed).
"""

from __future__ import annotations

import codecs

__all__ = ["TextAssembler", "ToolCallHoldback"]


class TextAssembler:
    """Accumulates generated text, cut at the first of ``stops``."""

    def __init__(self, stops: list[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = [stop for stop in stops if stop]
        self._hold = max((len(stop) for stop in self._stops), default=1) - 1
        self.text = ""
        self.stopped = False
        self._released = 0

    def feed(self, data: bytes) -> str:
        """Add a token's bytes; return the newly safe text (empty once stopped)."""
        if self.stopped:
            return ""
        before = len(self.text)
        self.text += self._decoder.decode(data)
        for stop in self._stops:
            found = self.text.find(stop, max(0, before - len(stop) + 1))
            if found >= 0:
                self.text = self.text[:found]
                self.stopped = True
        safe = len(self.text) if self.stopped else max(self._released, len(self.text) - self._hold)
        return self._release(safe)

    def finish(self) -> str:
        """The text not released yet (call once generation has ended)."""
        if not self.stopped:
            self.text += self._decoder.decode(b"", final=True)
        return self._release(len(self.text))

    def _release(self, upto: int) -> str:
        piece = self.text[self._released : upto]
        self._released = max(self._released, upto)
        return piece


_MARKERS = ("<tool_call>", "```")


class ToolCallHoldback:
    """Splits streamed text into content to send now and a tail that may hold tool calls.

    Text is sent until a ``<tool_call>`` tag or a code fence starts (or the
    answer starts with ``{``/``[``, bare JSON); from there everything is held
    for :func:`~agentspec.models.extract_tool_calls` at the end.  A partial
    marker at the end of the text is held until it is decided.
    """

    def __init__(self) -> None:
        self.sent = ""
        self.held = ""
        self.holding = False

    def feed(self, piece: str) -> str:
        if self.holding:
            self.held += piece
            return ""
        pending = self.held + piece
        self.held = ""
        if not (self.sent + pending).strip():
            self.held = pending
            return ""
        start = _marker_start(self.sent, pending)
        if start is not None:
            self.holding = True
            self.held = pending[start:]
            return self._send(pending[:start])
        keep = _partial_marker(pending)
        self.held = pending[len(pending) - keep :] if keep else ""
        return self._send(pending[: len(pending) - keep])

    def _send(self, text: str) -> str:
        self.sent += text
        return text


def _marker_start(sent: str, pending: str) -> int | None:
    if not sent.strip() and pending.lstrip().startswith(("{", "[")):
        return 0
    found = [index for index in (pending.find(marker) for marker in _MARKERS) if index >= 0]
    return min(found) if found else None


def _partial_marker(text: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a marker."""
    for length in range(min(len(text), max(map(len, _MARKERS)) - 1), 0, -1):
        if any(marker.startswith(text[-length:]) for marker in _MARKERS):
            return length
    return 0
