"""Hint drafter: external predictions of the completion join the tree whenever they are ready.

A hint is text that predicts what the model will write: the OoO sidecar's
rendered call (:mod:`agentspec.decoding.sidecar`), a SPORK probe's tokens
decoded to text, or anything a client sends.  Hints arrive in the request's
:class:`~agentspec.decoding.drafter.HintBox` from any thread at any time;
this drafter reads a snapshot on every tree and never waits, so a hint that
is late only helps less, and a wrong one only costs tree nodes (the verifier
accepts nothing the target would not write).

How hints are given:

* HTTP (``agentspec serve --decoder toolspec``): an extra body field
  ``"agentspec_hints": ["<tool_call>\\n{\\"name\\": ...", ...]`` on
  ``/v1/chat/completions`` (the OpenAI SDK: ``extra_body={"agentspec_hints":
  [...]}``); each string predicts the completion text from its start.
* Python: ``ToolSpecDecoder.generate(..., hints=[text])`` at the start, or
  ``generation.hints.put(text, source="hint.spork")`` on a running
  :class:`~agentspec.decoding.decoder.Generation` from any thread.

Alignment: while the output is a prefix of a hint, the rest of the hint is
drafted whole (up to ``max_whole_chars``) and declared a
:class:`~agentspec.decoding.drafter.Unit` (source ``<hint source>.whole``):
the decoder gives it the tree budget first and the pruner bets on it as one
piece, so a right guess given from the first forward is verified in the next
one; once they differ (the model wrote another value), the end of the
output is looked up in the hint with a suffix automaton and what followed it
there is drafted, so a hint with one wrong argument still drafts the
structure and the other arguments.  Example: hint ``{"name": "f",
"arguments": {"a": 1, "b": 2}}``, output ``{"name": "f", "arguments": {"a":
7`` -> after the model writes ``,`` the drafter proposes `` "b": 2}}``.

Cost: a hint's suffix automaton is built when the hint is put (:meth:`~agentspec.decoding.drafter.Hint.indexed`,
in the putting thread), and the request's box holds a bounded number of bounded hints
(:data:`~agentspec.decoding.drafter.MAX_BOX_HINTS`), so a step's drafting work is bounded whatever a client sends.
"""

from __future__ import annotations

from typing import Any

from agentspec.decoding.drafter import DraftState, Hint, Unit
from agentspec.engine.token_tree import TokenTree

__all__ = ["HintDrafter"]


class HintDrafter:
    """Drafts from the request's hints (module docstring)."""

    name = "hint"

    def __init__(self, *, max_chars: int = 160, min_match: int = 3, max_whole_chars: int = 1024) -> None:
        self.max_chars = max_chars
        self.min_match = min_match
        # An aligned hint is drafted whole, but a step tokenizes it again: bound that work (the tree budget cuts
        # the tokens anyway; 1024 characters are more tokens than a 64-node tree holds in any tokenizer here).
        self.max_whole_chars = max_whole_chars

    def propose(self, state: DraftState, budget: int) -> TokenTree:
        tree = TokenTree(root=state.output[-1], budget=budget)
        hints = state.request.hints.snapshot()
        if not hints:
            return tree
        text = state.text
        memo: dict[int, Any] = state.request.memo.setdefault(self.name, {})  # keyed by id(hint)
        for hint in hints:
            if tree.room <= 0:
                break
            if hint.text.startswith(text):
                rest = hint.text[len(text) : len(text) + self.max_whole_chars]
                for tokens in state.continuations(rest):
                    _add_piece(tree, tokens, hint.source)
                    state.units.append(Unit(f"{hint.source}.whole", tuple(int(t) for t in tokens)))
                continue
            for piece in self._realigned(memo, hint, text):
                for tokens in state.continuations(piece):
                    _add_piece(tree, tokens, hint.source)
        return tree

    def _realigned(self, memo: dict[int, Any], hint: Hint, text: str) -> list[str]:
        """What followed the output's end in ``hint``, once the output has left it."""
        entry = memo.get(id(hint))
        if entry is None:
            # The box's hints come indexed (built when put, off the decoding step); a bare Hint is indexed here.
            index = hint.index if hint.index is not None else Hint.indexed(hint.text, hint.source).index
            assert index is not None
            entry = memo[id(hint)] = (hint, index, index.matcher())
        _, index, matcher = entry
        matcher.follow(text)
        return index.continuations(matcher, max_chars=self.max_chars, min_match=self.min_match)


def _add_piece(tree: TokenTree, tokens: list[int], source: str) -> None:
    """Add ``tokens`` as a chain from the root: the first as ``source``, the others as ``source.rest``."""
    node = 0
    for index, token in enumerate(tokens):
        child = tree.add(node, int(token), source if index == 0 else f"{source}.rest")
        if child is None:
            return
        node = child
