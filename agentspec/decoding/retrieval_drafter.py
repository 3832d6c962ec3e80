"""Retrieval drafter: continue the output the way earlier calls and the prompt continued the same text.

Agents call the same tools again and again, with arguments that repeat or
are copied from the conversation.  :class:`CallHistory` keeps every finished
call (this process's requests, and optionally a JSON-lines file that
persists them) in one suffix automaton per tool name plus one over all
calls.  :class:`RetrievalDrafter` matches the end of the output against:

1. the earlier calls of the tool being called (all calls until the name is
   written), and
2. the request's prompt (tool schemas, the question, earlier calls and results
   rendered in the conversation),

and drafts what followed the longest match (and, as further branches, what
followed shorter matches that end elsewhere), tokenized canonically in
context.  Example: history holds ``{"name": "get_weather", "arguments":
{"city": "Paris", "unit": "celsius"}}`` and the output so far ends in
``"city": "Paris"``; the drafter proposes ``, "unit": "celsius"}}``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from agentspec.decoding.drafter import DraftState
from agentspec.decoding.json_prefix import analyze, find_call_start
from agentspec.decoding.suffix_index import Matcher, SuffixAutomaton
from agentspec.engine.token_tree import TokenTree

__all__ = ["CallHistory", "RetrievalDrafter", "calls_in"]

_ALL = ""


def calls_in(text: str) -> list[tuple[str, str]]:
    """The complete ``{"name": ..., "arguments": ...}`` objects in ``text``, as (name, canonical JSON text).

    >>> calls_in('<tool_call>\\n{"name": "f", "arguments": {"x": 1}}\\n</tool_call>')
    [('f', '{"name": "f", "arguments": {"x": 1}}')]
    """
    decoder = json.JSONDecoder()
    out = []
    at = text.find("{")
    while at >= 0:
        try:
            value, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at = text.find("{", at + 1)
            continue
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("name"), str) and "arguments" in item:
                canonical = {"name": item["name"], "arguments": item["arguments"]}
                out.append((item["name"], json.dumps(canonical, ensure_ascii=False)))
        at = text.find("{", end)
    return out


class CallHistory:
    """Earlier calls indexed by tool name; thread-safe; ``path`` persists them as JSON lines."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self._index: dict[str, SuffixAutomaton] = {_ALL: SuffixAutomaton()}
        self.path = Path(path) if path is not None else None
        self.count = 0
        if self.path is not None and self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                    self._add(str(record["name"]), str(record["text"]))
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line of an interrupted run

    def _add(self, name: str, text: str) -> None:
        self._index.setdefault(name, SuffixAutomaton()).add(text)
        self._index[_ALL].add(text)
        self.count += 1

    def add(self, name: str, text: str) -> None:
        """Remember one call (its JSON text)."""
        with self._lock:
            self._add(name, text)
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as sink:
                    sink.write(json.dumps({"name": name, "text": text}, ensure_ascii=False) + "\n")

    def add_output(self, text: str) -> int:
        """Remember every call in a finished output; return how many."""
        found = calls_in(text)
        for name, call in found:
            self.add(name, call)
        return len(found)

    def index(self, name: str | None) -> SuffixAutomaton | None:
        """The automaton of tool ``name``'s calls (of all calls for None); None when there are none."""
        with self._lock:
            found = self._index.get(name if name is not None else _ALL)
        return found if found is not None and found.version else None


class RetrievalDrafter:
    """Continuations from earlier calls of the same tool and from the prompt (module docstring)."""

    name = "retrieval"

    def __init__(
        self, history: CallHistory | None = None, *, max_chars: int = 40, min_match: int = 4, branches: int = 2,
        use_prompt: bool = True,
    ) -> None:
        self.history = history
        self.max_chars = max_chars
        self.min_match = min_match
        self.branches = branches
        self.use_prompt = use_prompt

    def propose(self, state: DraftState, budget: int) -> TokenTree:
        tree = TokenTree(root=state.output[-1], budget=budget)
        text = state.text
        memo: dict[str | int, Any] = state.request.memo.setdefault(self.name, {})  # "prompt", id(index)
        sources: list[tuple[str, SuffixAutomaton]] = []
        if self.history is not None:
            index = self.history.index(_call_name(text))
            if index is not None:
                sources.append(("retrieval.history", index))
        if self.use_prompt:
            prompt_index = memo.get("prompt")
            if prompt_index is None:
                prompt_index = memo["prompt"] = SuffixAutomaton()
                prompt_index.add(state.request.prompt_text)
            sources.append(("retrieval.prompt", prompt_index))
        for label, index in sources:
            matcher = _follow(memo, index, text)
            for piece in index.continuations(matcher, max_chars=self.max_chars, min_match=self.min_match,
                                             limit=self.branches):
                if tree.room <= 0:
                    return tree
                for tokens in state.continuations(piece):
                    tree.add_path(_whole(state, tokens, len(piece) == self.max_chars), label)
        return tree


def _follow(memo: dict[str | int, Any], index: SuffixAutomaton, text: str) -> Matcher:
    """The matcher of ``index`` over ``text``, advanced incrementally across calls of one request."""
    key = id(index)
    entry = memo.get(key)
    if entry is None or entry[0] != index.version or entry[1].fed > len(text):
        entry = (index.version, index.matcher())
        memo[key] = entry
    entry[1].follow(text)
    return entry[1]


def _call_name(text: str) -> str | None:
    start = find_call_start(text)
    return analyze(text[start:]).call_name if start is not None else None


def _whole(state: DraftState, tokens: list[int], cut: bool) -> list[int]:
    # A continuation cut at max_chars may end inside a word whose canonical token is longer: drop that token.
    return tokens[:-1] if cut and len(tokens) > 1 else tokens
