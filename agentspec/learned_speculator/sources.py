"""Where an argument's value comes from: the task text, an earlier call, an earlier result, a look-ahead, a constant.

A :class:`Source` is learned per (tool, argument) from the trajectories (:func:`candidate_sources` lists every
source that would have given the value a call really had) and evaluated at prediction (:func:`evaluate`) on a
:class:`Context`: the task text, the history so far and the look-ahead observations.  Typed values are found
in text with the value patterns of the miner's normaliser (:mod:`agentspec.normalize`), so ``the 2nd phone
number of the task text`` or ``the id in the last refund's answer`` are sources, whatever the bench.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentspec.learned_speculator.features import json_leaves
from agentspec.normalize import BoundedPattern, ValuePattern
from agentspec.types import Observation, ToolCall, canonical_json

SourceKind = Literal["text", "arg", "result", "lookahead", "const"]
KIND_ORDER: dict[str, int] = {"arg": 0, "result": 1, "lookahead": 2, "text": 3, "const": 4}
"""Between equally good sources, data flow first: a constant is right only while the data stays the same."""
NUMBER = "#number"
"""The type of a source that reads a number written in free text ("add 2.5 GB") as a JSON number: amounts have
value patterns only under an argument's name, so the typed values of free text never hold them."""
FIND_CACHE = 1024
"""Texts whose typed values :meth:`TypedValues.find` remembers."""
_NUMBER = re.compile(r"(?<![\w.-])-?\d+(?:\.\d+)?(?![\w.]?\d)")


class Source(BaseModel):
    """One way to get an argument's value.

    ``text``: the ``index``-th distinct value of pattern ``type`` in the task text (type :data:`NUMBER`: its
    ``index``-th distinct number).  ``arg``: argument ``path`` of the latest earlier call of tool ``tool``.
    ``result``: the latest observation of tool ``tool`` that has JSON ``path``, at that path (or, with ``type``,
    the latest one's ``index``-th typed value).  ``lookahead``: the same, in the observation of the look-ahead
    call ``tool`` (a probe key).  ``const``: ``value``.

    ``fresh``: the first of the values (in order) that no earlier call of the same tool gave the same argument:
    a ``path`` with ``*`` for a list's index (``line_ids.*``: the next line not yet looked at), or every typed
    value of ``type``.  Evaluated for one argument of one tool (``slot``); without one, the first value.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: SourceKind
    tool: str = ""
    path: str = ""
    type: str = ""
    index: int = Field(0, ge=0)
    value: Any = None
    fresh: bool = False

    @property
    def data_flow(self) -> bool:
        """Whether the value comes from the task's data (the "strict" criterion), not from a constant."""
        return self.kind != "const"

    @property
    def key(self) -> str:
        data = self.model_dump(mode="json")
        if not self.fresh:
            del data["fresh"]  # the keys of the sources there were before fresh ones
        return canonical_json(data)


def _searchable(pattern: ValuePattern) -> BoundedPattern:
    return BoundedPattern(rf"(?<![\w.])(?:{pattern.value.pattern})(?![\w])", shown=pattern.value.pattern)


@dataclass(frozen=True)
class TypedValues:
    """Finds typed values in free text with the patterns that need no argument name."""

    patterns: tuple[ValuePattern, ...]

    @cached_property
    def _compiled(self) -> tuple[tuple[str, BoundedPattern], ...]:
        return tuple((p.type, _searchable(p)) for p in self.patterns if p.key is None)

    @cached_property
    def _found(self) -> dict[str, dict[str, list[str]]]:
        return {}

    def find(self, text: str) -> dict[str, list[str]]:
        """Pattern type -> its distinct values in ``text``, in order of appearance (remembered per text: the same
        observations come back step after step)."""
        cached = self._found.get(text)
        if cached is None:
            cached = self._find(text)
            if len(self._found) >= FIND_CACHE:
                del self._found[next(iter(self._found))]
            self._found[text] = cached
        return cached

    def _find(self, text: str) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for type_, regex in self._compiled:
            values = list(dict.fromkeys(match.group(0) for match in regex.finditer(text)))
            if values:
                found.setdefault(type_, []).extend(v for v in values if v not in found.get(type_, ()))
        return found


@dataclass
class Context:
    """What sources read at one step: the task text, the history, the look-ahead observations."""

    text: str
    history: Sequence[tuple[ToolCall, Observation | None]]
    lookahead: Mapping[str, str]
    typed: TypedValues
    _cache: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    _numbers: dict[str, list[int | float]] = field(default_factory=dict)
    _leaves: dict[str, list[tuple[str, Any]] | None] = field(default_factory=dict)
    _used: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def leaves_in(self, name: str, content: str) -> list[tuple[str, Any]] | None:
        """:func:`~agentspec.learned_speculator.features.json_leaves` of a text, cached per name like :meth:`typed_in`."""
        if name not in self._leaves:
            self._leaves[name] = json_leaves(content)
        return self._leaves[name]

    def used(self, slot: tuple[str, str]) -> set[str]:
        """The values (canonical JSON) that earlier calls of tool ``slot[0]`` gave argument ``slot[1]``."""
        found = self._used.get(slot)
        if found is None:
            tool, name = slot
            found = {canonical_json(call.arguments[name]) for call, _ in self.history
                     if call.name == tool and name in call.arguments}
            self._used[slot] = found
        return found

    def typed_in(self, name: str, content: str) -> dict[str, list[str]]:
        """Typed values of a text, cached per name (the task text, a result, a probe)."""
        if name not in self._cache:
            self._cache[name] = self.typed.find(content)
        return self._cache[name]

    def numbers_in(self, name: str, content: str) -> list[int | float]:
        """The distinct numbers written in a text, in order of appearance, cached per name like :meth:`typed_in`."""
        if name not in self._numbers:
            found = {canonical_json(n): n for n in map(_number, _NUMBER.findall(content))}
            self._numbers[name] = list(found.values())
        return self._numbers[name]

    def latest_call(self, tool: str) -> ToolCall | None:
        for call, _ in reversed(self.history):
            if call.name == tool:
                return call
        return None

    def latest_result(self, tool: str) -> tuple[int, str] | None:
        for step in range(len(self.history) - 1, -1, -1):
            call, observation = self.history[step]
            if call.name == tool and observation is not None:
                return step, observation.content
        return None

    def results(self, tool: str) -> list[tuple[int, str]]:
        """Every observation of tool ``tool``, latest first, with its step."""
        return [(step, observation.content) for step in range(len(self.history) - 1, -1, -1)
                for call, observation in (self.history[step],) if call.name == tool and observation is not None]


def _number(text: str) -> int | float:
    return float(text) if "." in text else int(text)


Slot = tuple[str, str]
"""A tool and one of its arguments: what a ``fresh`` source's value is fresh for."""


def _first(values: Sequence[Any], source: Source, context: Context, slot: Slot | None) -> tuple[bool, Any]:
    """The first of ``values``; for a ``fresh`` source evaluated for ``slot``, the first that slot never had."""
    if source.fresh and slot is not None:
        used = context.used(slot)
        values = [v for v in values if canonical_json(v) not in used]
    return (True, values[0]) if values else (False, None)


def _typed(source: Source, name: str, content: str, context: Context, slot: Slot | None = None) -> tuple[bool, Any]:
    """The ``source.index``-th value of type ``source.type`` in ``content`` (fresh: the first fresh one)."""
    values: Sequence[Any] = (context.numbers_in(name, content) if source.type == NUMBER
                             else context.typed_in(name, content).get(source.type, []))
    if source.fresh:
        return _first(values, source, context, slot)
    return (True, values[source.index]) if source.index < len(values) else (False, None)


def wildcard(path: str) -> str:
    """``path`` with every list index as ``*``: ``lines.2.id`` -> ``lines.*.id``."""
    return ".".join("*" if part.isdigit() else part for part in path.split("."))


def _at_path(source: Source, name: str, content: str, context: Context) -> list[Any]:
    """The values at ``source.path`` of a JSON observation (every match of a ``*`` path, in order)."""
    leaves = context.leaves_in(name, content) or ()
    if "*" not in source.path:
        return [value for path, value in leaves if path == source.path]
    return [value for path, value in leaves if wildcard(path) == source.path]


def _from_content(source: Source, name: str, content: str, context: Context, slot: Slot | None = None) -> tuple[bool, Any]:
    if source.type:
        return _typed(source, name, content, context, slot)
    return _first(_at_path(source, name, content, context), source, context, slot)


def evaluate(source: Source, context: Context, slot: Slot | None = None) -> tuple[bool, Any]:
    """``(available, value)`` of ``source`` at ``context``, for argument ``slot`` (tool, argument: what a fresh
    source's value must be new to)."""
    if source.kind == "const":
        return True, source.value
    if source.kind == "text":
        return _typed(source, "<text>", context.text, context, slot)
    if source.kind == "arg":
        call = context.latest_call(source.tool)
        return (True, call.arguments[source.path]) if call is not None and source.path in call.arguments else (False, None)
    if source.kind == "result":
        if source.type:
            found = context.latest_result(source.tool)
            return _from_content(source, f"<result {found[0]}>", found[1], context, slot) if found else (False, None)
        for step, content in context.results(source.tool):  # the latest that has the path
            available, value = _from_content(source, f"<result {step}>", content, context, slot)
            if available:
                return available, value
        return False, None
    seen = context.lookahead.get(source.tool)
    return _from_content(source, f"<probe {source.tool}>", seen, context, slot) if seen is not None else (False, None)


def _content_sources(kind: SourceKind, tool: str, content: str, wanted: str, context: Context, name: str,
                     slot: Slot | None = None) -> list[Source]:
    paths = [path for path, value in context.leaves_in(name, content) or () if canonical_json(value) == wanted]
    found = [Source(kind=kind, tool=tool, path=path) for path in paths]
    if slot is not None:
        # The next item of a list not yet used: only where it gives the value (the earlier items were used).
        for path in dict.fromkeys(wildcard(p) for p in paths if wildcard(p) != p):
            fresh = Source(kind=kind, tool=tool, path=path, fresh=True)
            if canonical_json(_from_content(fresh, name, content, context, slot)[1]) == wanted:
                found.append(fresh)
    for type_, values in sorted(context.typed_in(name, content).items()):
        hits = [i for i, v in enumerate(values) if canonical_json(v) == wanted]
        found += [Source(kind=kind, tool=tool, type=type_, index=i) for i in hits]
        if hits and hits[0] > 0 and slot is not None:
            fresh = Source(kind=kind, tool=tool, type=type_, fresh=True)
            if canonical_json(_typed(fresh, name, content, context, slot)[1]) == wanted:
                found.append(fresh)
    return found


def _text_numbers(value: Any, context: Context) -> list[Source]:
    """The numbers written in the task text that equal ``value`` (a JSON number, not a flag), as sources."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return []
    wanted = canonical_json(value)
    return [Source(kind="text", type=NUMBER, index=i) for i, v in enumerate(context.numbers_in("<text>", context.text))
            if canonical_json(v) == wanted]


def candidate_sources(value: Any, context: Context, slot: Slot | None = None) -> list[Source]:
    """Every source that gives exactly ``value`` at ``context`` for argument ``slot`` (a constant always does)."""
    wanted = canonical_json(value)
    found: list[Source] = []
    for type_, values in sorted(context.typed_in("<text>", context.text).items()):
        found += [Source(kind="text", type=type_, index=i) for i, v in enumerate(values) if canonical_json(v) == wanted]
    found += _text_numbers(value, context)
    seen_calls: set[str] = set()
    seen_results: set[str] = set()
    for step in range(len(context.history) - 1, -1, -1):  # latest first: a source names the latest call of a tool
        call, observation = context.history[step]
        if call.name not in seen_calls:
            seen_calls.add(call.name)
            found += [Source(kind="arg", tool=call.name, path=k) for k, v in sorted(call.arguments.items())
                      if canonical_json(v) == wanted]
        if observation is None:
            continue
        name = f"<result {step}>"
        if call.name not in seen_results:
            seen_results.add(call.name)
            found += _content_sources("result", call.name, observation.content, wanted, context, name, slot)
        else:
            # An older result of the tool: its fields are a source where no later result has the field.
            found += [s for s in _content_sources("result", call.name, observation.content, wanted, context, name, slot)
                      if not s.type and canonical_json(evaluate(s, context, slot)[1]) == wanted]
    for probe, content in sorted(context.lookahead.items()):
        found += _content_sources("lookahead", probe, content, wanted, context, f"<probe {probe}>", slot)
    found.append(Source(kind="const", value=value))
    return list({source.key: source for source in found}.values())
