"""Schema drafter: the tool-call grammar's forced tokens, and every legal name, key, enum value and boolean.

Most of a tool call is fixed by its schema: ``<tool_call>\\n{"name": "``, the
separators, the keys of required parameters.  The drafter follows the
request's llguidance grammar (:func:`~agentspec.engine.grammar.tool_grammar`, the server's too):

1. the tokens the grammar forces from here (``compute_ff_tokens``), then the
   forced bytes that no single token covers yet (``compute_ff_bytes``,
   tokenized in context), form a chain;
2. where the grammar leaves a choice, the JSON text so far
   (:mod:`~agentspec.decoding.json_prefix`) says what is being chosen, and
   every legal completion becomes a branch: tool names, the parameter names
   not used yet, enum values, ``true``/``false``, a default value, the end of
   an object or a ``, "next_key": `` separator, and values copied from the
   question (numbers, capitalized or quoted phrases);
3. each branch, joined with the forced bytes before it (``": `` + ``true``
   is the one token `` true``), is tokenized canonically in context
   (:func:`~agentspec.decoding.drafter.tokens_in_context`), kept only as far
   as the grammar accepts it, and continued by the forced tokens after it (up
   to ``depth`` choices deep).  A branch's first own token carries the
   choice's source (``schema.choice``, ``schema.copy``), the rest of it
   ``<source>.rest``: the decoder's pruner learns how often each is right.

Example (the grammar of one tool ``get_weather(city: str, unit: "celsius" |
"fahrenheit")``, output so far ``<tool_call>``)::

    drafter.propose(state, 64)
    # chain:    \\n {" name ": " get _weather ", " arguments ": {" city ": "
    # and once the city is written (output ends in ``Paris"``):
    # branches: , "unit": "celsius"}}\\n</tool_call>  |  , "unit": "fahrenheit"}}...

Unconstrained requests (``tool_choice`` auto) get the same drafts once the
output opens a call (a ``<tool_call>`` tag or a json code fence): the
drafter then follows the call with a grammar of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agentspec.decoding.drafter import DraftRequest, DraftState, tokens_in_context
from agentspec.decoding.json_prefix import JsonContext, analyze, find_call_start, schema_at
from agentspec.engine.grammar import tool_defs, tool_grammar
from agentspec.engine.model import require
from agentspec.engine.token_tree import TokenTree

__all__ = ["SchemaDrafter", "candidates", "copied", "question_values"]

_OPENINGS = ("<tool_call>\n", "```json\n")


class SchemaDrafter:
    """Grammar-forced chains plus enumerated choices (module docstring)."""

    name = "schema"

    def __init__(self, *, depth: int = 2, max_choices: int = 8, forced_bytes: bool = True, copy: bool = True,
                 max_nodes: int = 40) -> None:
        self.depth = depth
        # Choices two levels deep can fill any tree; leave room for the drafters after this one (hints,
        # retrieval), whose single guesses are often better than the tenth enumerated branch.
        self.max_nodes = max_nodes
        self.max_choices = max_choices
        self.forced_bytes = forced_bytes
        self.copy = copy

    def propose(self, state: DraftState, budget: int) -> TokenTree:
        tree = TokenTree(root=state.output[-1], budget=min(budget, self.max_nodes))
        tools = _tool_schemas(state.request)
        if state.matcher is not None:
            text = state.text
            start = find_call_start(text)
            call_text = text[start:] if start is not None else ""
            self._expand(state, tree, 0, state.matcher.deep_copy(), list(state.output), call_text,
                         start is not None, tools, 0)
            return tree
        if tools:
            self._unconstrained(state, tree, tools)
        return tree

    # ------------------------------------------------------------ constrained

    def _expand(
        self, state: DraftState, tree: TokenTree, node: int, matcher: Any, output: list[int], call_text: str,
        in_call: bool, tools: dict[str, dict[str, Any]], level: int,
    ) -> None:
        """Add the forced chain from ``node``, then (``level < depth``) a branch per legal choice."""
        lm = state.lm
        forced = list(matcher.compute_ff_tokens())
        if forced and matcher.consume_tokens(forced):
            chained = self._chain(tree, node, forced, self.name)
            if chained is None:
                return
            node = chained
            output = output + forced
            in_call, call_text = _grow(in_call, call_text, _text(lm, forced))
        if matcher.is_stopped() or tree.room <= 0:
            return
        rest = bytes(matcher.compute_ff_bytes()).decode("utf-8", "ignore") if self.forced_bytes else ""
        if rest:
            for tokens in tokens_in_context(lm, output, rest):
                tokens = tokens[: matcher.validate_tokens(tokens)]
                if tokens:
                    # Forced bytes pin down text, not tokens (" " may still merge with what follows, as in
                    # `` true``): draft them alone, and again joined with each choice below.
                    self._chain(tree, node, tokens, f"{self.name}.bytes")
        choosing, text_then = _grow(in_call, call_text, rest)
        if level >= self.depth or not choosing:
            return
        ctx = analyze(text_then)
        options = [(text, f"{self.name}.choice") for text in candidates(ctx, tools)[: self.max_choices]]
        if self.copy:
            options += [(text, f"{self.name}.copy") for text in copied(ctx, tools, _question_values(state.request))]
        for choice, source in options:
            if tree.room <= 0:
                return
            for tokens in tokens_in_context(lm, output, rest + choice):
                tokens = tokens[: matcher.validate_tokens(tokens)]
                if not tokens:
                    continue
                branch = matcher.deep_copy()
                if not branch.consume_tokens(tokens):
                    continue
                child = self._choice_chain(tree, node, tokens, lm, len(rest), source)
                if child is None:
                    return
                written = _text(lm, tokens)
                if len(written) < len(rest) + len(choice):
                    continue  # the grammar cut the choice short: nothing sure follows it
                grown, grown_text = _grow(in_call, call_text, written)
                self._expand(state, tree, child, branch, output + tokens, grown_text, grown, tools, level + 1)

    def _choice_chain(self, tree: TokenTree, node: int, tokens: Sequence[int], lm: Any, forced: int,
                      source: str) -> int | None:
        """Add forced text + a choice: its forced part as ``schema.bytes``, its first own token as ``source``,
        the rest of it as ``source.rest``.

        The doubt is at the choice's first token; once the target takes it, the
        rest of a name or a copied value nearly always follows, and the pruner
        must not discount every token of it as a fresh guess.
        """
        seen = 0
        first: int | None = None
        for token in tokens:
            seen += len(lm.token_bytes(token).decode("utf-8", "ignore"))
            if seen <= forced:
                label = f"{self.name}.bytes"
            elif first is None:
                label, first = source, token
            else:
                label = f"{source}.rest"
            child = tree.add(node, token, label)
            if child is None:
                return None
            node = child
        return node

    def _chain(self, tree: TokenTree, node: int, tokens: Sequence[int], source: str) -> int | None:
        for token in tokens:
            child = tree.add(node, token, source)
            if child is None:
                return None
            node = child
        return node

    # ------------------------------------------------------------ unconstrained

    def _unconstrained(self, state: DraftState, tree: TokenTree, tools: dict[str, dict[str, Any]]) -> None:
        text = state.text
        start = find_call_start(text)
        if start is None:
            # Before any call: the output may be opening one.
            stripped = text.lstrip()
            for opening in _OPENINGS:
                if opening.startswith(stripped) and len(stripped) < len(opening):
                    rest = opening[len(stripped):] + '{"name": "'
                    for tokens in state.continuations(rest):
                        tree.add_path(tokens, self.name)
            return
        matcher = _call_matcher(state.request, text[start:])
        if matcher is None:
            return
        # The follower grammar runs on a re-tokenization of the call: draft in its token space, then
        # re-tokenize each branch in the context of the real output.
        scratch = TokenTree(root=state.output[-1], budget=tree.room)
        self._expand(state, scratch, 0, matcher, list(state.output), text[start:], True, tools, 0)
        for leaf in scratch.leaves():
            if leaf == 0:
                continue
            for tokens in state.continuations(_text(state.lm, scratch.path_tokens(leaf))):
                tree.add_path(tokens, scratch.sources[leaf])


def candidates(ctx: JsonContext, tools: dict[str, dict[str, Any]]) -> list[str]:
    """Legal completions at ``ctx`` that the schema names, likeliest first (text to append).

    >>> tools = {"get_weather": {"properties": {"city": {"type": "string"},
    ...          "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}
    >>> candidates(analyze('{"name": "get_w'), tools)
    ['eather"']
    >>> candidates(analyze('{"name": "get_weather", "arguments": {"city": "Paris"'), tools)
    [', "unit": ', '}']
    >>> candidates(analyze('{"name": "get_weather", "arguments": {"city": "Paris", "unit": '), tools)
    ['"celsius"', '"fahrenheit"']
    """
    kind = ctx.kind
    if kind in ("key", "in_key", "after_value"):
        schema = schema_at(tools, ctx, ctx.path) if ctx.container == "object" else None
        if ctx.container == "array":
            return [", ", "]"] if kind == "after_value" else []
        if schema is None:
            return []
        keys = _keys(schema, ctx.seen)
        if kind == "in_key":
            return [key[len(ctx.partial):] + '": ' for key in keys if key.startswith(ctx.partial)]
        done = set(schema.get("required", [])) <= set(ctx.seen)
        if kind == "key":
            return [json.dumps(key) + ": " for key in keys] + (["}"] if done else [])
        return [f", {json.dumps(key)}: " for key in keys] + (["}"] if done else [])
    if kind not in ("value", "in_string", "in_scalar"):
        return []
    schema = schema_at(tools, ctx, ctx.path)
    if schema is None:
        return []
    values = _values(schema)
    if kind == "value":
        return [json.dumps(value, ensure_ascii=False) for value in values]
    if kind == "in_string":
        # The text so far is the opening quote and the escaped partial: append the rest of the escaped value.
        written = len(json.dumps(ctx.partial, ensure_ascii=False)) - 1
        return [json.dumps(value, ensure_ascii=False)[written:] for value in values
                if isinstance(value, str) and value.startswith(ctx.partial)]
    out = [json.dumps(v)[len(ctx.partial):] for v in values
           if not isinstance(v, str) and json.dumps(v).startswith(ctx.partial) and json.dumps(v) != ctx.partial]
    if ctx.container == "object" and _is_number(ctx.partial):
        # A number may be complete: what follows a value in its object.
        out += candidates(replace(ctx, kind="after_value", path=ctx.path[:-1], partial=""), tools)
    return out


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
# A capitalized phrase (a house number may lead it: "221B Baker Street, Berkeley"), or a quoted one.
_PHRASE = re.compile(r"(?:[A-Z]|\d+[A-Za-z]* (?=[A-Z]))[\w'&.-]*(?:[ ,]+(?:[A-Z0-9][\w'&.-]*|of|de|la|and))*[A-Za-z0-9]|'([^']{2,60})'|\"([^\"]{2,60})\"")


def question_values(question: str) -> tuple[list[Any], list[str]]:
    """Numbers and phrases of the question that arguments are often copied from (in order of appearance).

    >>> question_values("Find the hypotenuse of a triangle with sides 4 and 5.5 in San Francisco, CA.")
    ([4, 5.5], ['Find', 'San Francisco, CA'])
    >>> question_values("A 'Plus' Uber from 221B Baker Street, Berkeley, CA")[1]
    ['Plus', 'Uber', '221B Baker Street, Berkeley, CA']
    """
    numbers: list[Any] = []
    for match in _NUMBER.finditer(question):
        value = json.loads(match.group())
        if value not in numbers:
            numbers.append(value)
    phrases: list[str] = []
    for match in _PHRASE.finditer(question):
        phrase = match.group(1) or match.group(2) or match.group()
        if phrase not in phrases:
            phrases.append(phrase)
    return numbers, phrases


def copied(ctx: JsonContext, tools: dict[str, dict[str, Any]], values: tuple[list[Any], list[str]],
           limit: int = 6) -> list[str]:
    """Argument values copied from the question where the schema allows them (numbers, phrases).

    >>> tools = {"f": {"properties": {"x": {"type": "integer"}, "city": {"type": "string"}}}}
    >>> copied(analyze('{"name": "f", "arguments": {"x": '), tools, ([4, 5.5], []))
    ['4']
    >>> copied(analyze('{"name": "f", "arguments": {"x": 4, "city": "San'), tools, ([], ["San Francisco, CA"]))
    [' Francisco, CA"']
    """
    if ctx.kind not in ("value", "in_string"):
        return []
    schema = schema_at(tools, ctx, ctx.path)
    if schema is None or "enum" in schema or "const" in schema:
        return []
    kinds = schema.get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    numbers, phrases = values
    if ctx.kind == "value":
        if kinds & {"integer", "number"}:
            allowed = [n for n in numbers if isinstance(n, int) or "number" in kinds]
            return [json.dumps(n) for n in allowed[:limit]]
        if "string" in kinds:
            return [json.dumps(p, ensure_ascii=False) for p in phrases[:limit]]
        return []
    if "string" not in kinds:
        return []
    written = len(json.dumps(ctx.partial, ensure_ascii=False)) - 1
    return [json.dumps(p, ensure_ascii=False)[written:] for p in phrases
            if p.startswith(ctx.partial) and p != ctx.partial][:limit]


def _is_number(text: str) -> bool:
    try:
        return isinstance(json.loads(text), (int, float)) and not isinstance(json.loads(text), bool)
    except json.JSONDecodeError:
        return False


def _keys(schema: dict[str, Any], seen: frozenset[str]) -> list[str]:
    """The object's keys not written yet: required ones first, each group in schema order."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return []
    required = [key for key in schema.get("required", []) if key in properties and key not in seen]
    return required + [key for key in properties if key not in seen and key not in required]


def _values(schema: dict[str, Any]) -> list[Any]:
    """The values a schema enumerates: const, enum, booleans, a default."""
    if "const" in schema:
        return [schema["const"]]
    values: list[Any] = list(schema.get("enum") or [])
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "boolean" in kinds:
        values += [True, False]
    if "default" in schema and schema["default"] not in values:
        values.append(schema["default"])
    return values


def _grow(in_call: bool, call_text: str, added: str) -> tuple[bool, str]:
    """(in a call, the call's JSON text so far) once ``added`` is written after ``call_text``."""
    if in_call:
        return True, call_text + added
    if "{" in added:
        return True, added[added.index("{"):]
    return False, ""


def _text(lm: Any, tokens: Sequence[int]) -> str:
    return b"".join(lm.token_bytes(t) for t in tokens).decode("utf-8", "ignore")


def _question_values(request: DraftRequest) -> tuple[list[Any], list[str]]:
    memo = request.memo.get("schema.question")
    if memo is None:
        memo = request.memo["schema.question"] = question_values(request.question or request.prompt_text[-1000:])
    return memo


def _tool_schemas(request: DraftRequest) -> dict[str, dict[str, Any]]:
    memo = request.memo.get("schema.tools")
    if memo is None:
        memo = {tool["name"]: tool.get("parameters") or {} for tool in request.tools if "name" in tool}
        request.memo["schema.tools"] = memo
    return memo


def _call_matcher(request: DraftRequest, call_text: str) -> Any:
    """A matcher of the tool grammar that has read ``call_text`` (the JSON written so far), or None."""
    grammar = request.memo.get("schema.follower")
    if grammar is None:
        defs = tool_defs(request.tools)
        grammar = request.memo["schema.follower"] = tool_grammar(defs, ll_tokenizer=request.lm.ll_tokenizer)
    # Silent: output that is not a call (free text, a malformed call) is an expected miss here, not a warning.
    matcher = require("llguidance").LLMatcher(request.lm.ll_tokenizer, grammar, log_level=0)
    # The grammar reads bytes, whatever the tokenization: the opening tag (a special token where the
    # vocabulary has one, which encode() yields too), then the call so far.
    opening = request.lm.encode("<tool_call>\n")
    if not matcher.consume_tokens(opening) or not matcher.consume_tokens(request.lm.encode(call_text)):
        return None
    return matcher
