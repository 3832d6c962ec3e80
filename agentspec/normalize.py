"""Normalization: task-specific values become typed slots, so one skeleton covers many tasks.

A :class:`Normalizer` turns a window of steps (calls with their observations)
into a :class:`Skeleton`: the calls as macro steps whose task-specific values
(customer ids, line ids, phone numbers, bill ids, dates, amounts...) are
``{"$slot": NAME}`` templates.  Inside one window the same value is always the
same slot, which records the window's data flow::

    >>> from agentspec.types import Observation, ToolCall
    >>> lookup = ToolCall(name="get_customer_by_phone", arguments={"phone_number": "555-123-2002"})
    >>> found = Observation(call_id="1", name="get_customer_by_phone", content='{"customer_id": "C1001"}')
    >>> refuel = ToolCall(name="refuel_data", arguments={"customer_id": "C1001", "gb_amount": 2.0})
    >>> skeleton = Normalizer().skeleton([(lookup, found), (refuel, None)])
    >>> [step.arguments for step in skeleton.steps]
    [{'phone_number': {'$slot': 'phone_number'}}, {'customer_id': {'$slot': 'customer_id'}, 'gb_amount': {'$slot': 'amount'}}]
    >>> skeleton.flow["customer_id"]
    'steps[0].observation'

Which values are task-specific comes from a pattern table: the bench's own
(``TelecomBench.value_patterns()``: its id formats) first, then the generic
:data:`GENERIC_PATTERNS` (uuids, e-mails, timestamps, dates, phone numbers,
``*_id`` arguments, prefixed ids like ``C1001``, amounts under amount-like
argument names).  Nothing here knows a particular benchmark's ids.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

import regex

from agentspec.errors import ConfigError
from agentspec.macros import MacroStep
from agentspec.types import Observation, ToolCall, canonical_json

T = TypeVar("T")

KEY_TYPE = "{key}"
"""A pattern whose type is this placeholder names its slots after the argument (``customer_id``)."""


REGEX_TIMEOUT_S = 1.0
"""The longest one match of a value pattern may take.  Patterns come from files (a speculator's ``value_patterns``,
a bench's table): one that backtracks without end on some text must fail, not hang the run."""


class BoundedPattern:
    """A regular expression whose every match is bounded in time (the ``regex`` engine's timeout): one that runs
    past :data:`REGEX_TIMEOUT_S` raises :class:`~agentspec.errors.ConfigError` naming the pattern."""

    __slots__ = ("_compiled", "pattern", "shown")

    def __init__(self, pattern: str, shown: str | None = None) -> None:
        self.pattern = pattern
        self.shown = shown if shown is not None else pattern  # as its file wrote it (``pattern`` may wrap it)
        self._compiled = regex.compile(pattern)

    def _bounded(self, work: Callable[[], T], text: str) -> T:
        try:
            return work()
        except TimeoutError:
            raise ConfigError(f"the value pattern `{self.shown}` took over {REGEX_TIMEOUT_S:g} s on a text of "
                              f"{len(text)} characters (it backtracks without end): fix or remove it") from None

    def search(self, text: str) -> Any:
        return self._bounded(lambda: self._compiled.search(text, timeout=REGEX_TIMEOUT_S), text)

    def fullmatch(self, text: str) -> Any:
        return self._bounded(lambda: self._compiled.fullmatch(text, timeout=REGEX_TIMEOUT_S), text)

    def finditer(self, text: str) -> list[Any]:
        """Every match, found within one time bound."""
        return self._bounded(lambda: list(self._compiled.finditer(text, timeout=REGEX_TIMEOUT_S)), text)


@dataclass(frozen=True, slots=True)
class ValuePattern:
    """Values of one slot type: the whole value matches ``value``, and the argument name ``key`` (if given)."""

    type: str
    value: BoundedPattern
    key: BoundedPattern | None = None

    @classmethod
    def of(cls, type_: str, value: str, key: str | None = None) -> ValuePattern:
        return cls(type_, BoundedPattern(value), BoundedPattern(key) if key is not None else None)

    def match(self, key: str | None, text: str) -> str | None:
        """The slot type when this pattern covers ``text`` under argument name ``key``."""
        if self.key is not None and (key is None or not self.key.search(key)):
            return None
        if not self.value.fullmatch(text):
            return None
        if self.type == KEY_TYPE:
            return key or "id"
        return self.type


GENERIC_PATTERNS: tuple[ValuePattern, ...] = (
    ValuePattern.of("uuid", r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"),
    ValuePattern.of("email", r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}"),
    ValuePattern.of("timestamp", r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"),
    ValuePattern.of("date", r"\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{4}"),
    ValuePattern.of("phone_number", r"(\+\d{1,3}[ .-]?)?\(?\d{3}\)?[ .-]?\d{3}[ .-]?\d{4}"),
    # An argument named like an id holding something id-like (letters and digits, no spaces).
    ValuePattern.of(KEY_TYPE, r"[\w.:-]*\d[\w.:-]*", key=r"(^|_)id$"),
    ValuePattern.of("id", r"[A-Za-z]{1,4}[-_]?\d{3,}"),
    # Numbers are only task-specific where the argument says it is money or a quantity bought.
    ValuePattern.of("amount", r"-?\d+(\.\d+)?", key=r"(?i)amount|price|cost|total|balance|fee|charge|payment"),
)


def patterns_from_table(table: Iterable[tuple[str, str, str | None]]) -> list[ValuePattern]:
    """A bench's table of ``(slot type, value regex, argument-name regex or None)`` rows, compiled."""
    return [ValuePattern.of(type_, value, key) for type_, value, key in table]


def _leaf_text(value: Any) -> str | None:
    """The text patterns see: strings as they are, numbers as JSON; other values are never slots."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return canonical_json(value)
    return None


def _mentions(text: str, leaf: str) -> bool:
    """Whether an observation's text contains the value as a whole token (not inside a longer id)."""
    return re.search(rf"(?<![\w.]){re.escape(leaf)}(?![\w])", text) is not None


def render(step: MacroStep) -> str:
    """A short human form of a step: ``refuel_data(customer_id=$customer_id, gb_amount=2.0)``."""

    def show(value: Any) -> str:
        if isinstance(value, dict) and set(value) == {"$slot"}:
            return f"${value['$slot']}"
        return canonical_json(value)

    return f"{step.name}({', '.join(f'{k}={show(v)}' for k, v in sorted(step.arguments.items()))})"


@dataclass(frozen=True)
class Skeleton:
    """A normalized window: macro steps with slots, their types, data flow and this window's values."""

    steps: tuple[MacroStep, ...]
    slots: dict[str, str] = field(default_factory=dict)
    flow: dict[str, str] = field(default_factory=dict)
    """Slot -> where its value first appears: ``steps[i].arguments.PATH`` or ``steps[i].observation``."""
    bindings: dict[str, str] = field(default_factory=dict)
    """Slot -> the canonical JSON of the value it stands for in this window."""

    @cached_property
    def key(self) -> str:
        """Canonical text of the steps: equal for windows that are the same skeleton."""
        return canonical_json([step.model_dump(mode="json") for step in self.steps])


class Normalizer:
    """Replaces task-specific values with typed slots (see module docstring)."""

    def __init__(self, patterns: Sequence[ValuePattern] = ()) -> None:
        self.patterns: tuple[ValuePattern, ...] = (*patterns, *GENERIC_PATTERNS)

    def slot_type(self, key: str | None, value: Any) -> str | None:
        """The slot type of ``value`` under argument name ``key``, or None for a constant."""
        text = _leaf_text(value)
        if text is None:
            return None
        for pattern in self.patterns:
            found = pattern.match(key, text)
            if found is not None:
                return found
        return None

    def skeleton(self, steps: Sequence[tuple[ToolCall, Observation | None]]) -> Skeleton:
        """Normalize one window of steps; a value seen before in the window reuses its slot."""
        state = _Window(self)
        templates = []
        for index, (call, observation) in enumerate(steps):
            templates.append(MacroStep(name=call.name, arguments=state.template(call.arguments, index, (), None)))
            if observation is not None:
                state.observations.append((index, observation.content))
        return Skeleton(tuple(templates), state.slots, state.flow, state.bindings)

    def node(self, call: ToolCall) -> Skeleton:
        """One call alone, normalized: the node of the transition graph."""
        return self.skeleton([(call, None)])


class _Window:
    """Slot bookkeeping while one window is normalized."""

    def __init__(self, normalizer: Normalizer) -> None:
        self.normalizer = normalizer
        self.slot_of: dict[str, str] = {}
        self.slots: dict[str, str] = {}
        self.flow: dict[str, str] = {}
        self.bindings: dict[str, str] = {}
        self.observations: list[tuple[int, str]] = []

    def template(self, value: Any, index: int, path: tuple[str, ...], key: str | None) -> Any:
        if isinstance(value, dict):
            return {k: self.template(v, index, (*path, k), k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.template(v, index, (*path, str(i)), key) for i, v in enumerate(value)]
        seen = canonical_json(value)
        if seen in self.slot_of:
            # The same value again in this window: the same slot, whatever its argument is called (data flow).
            return {"$slot": self.slot_of[seen]}
        type_ = self.normalizer.slot_type(key, value)
        if type_ is None:
            return value
        name = type_
        number = 1
        while name in self.slots:
            number += 1
            name = f"{type_}_{number}"
        self.slot_of[seen], self.slots[name], self.bindings[name] = name, type_, seen
        self.flow[name] = self._source(value, index, path)
        return {"$slot": name}

    def _source(self, value: Any, index: int, path: tuple[str, ...]) -> str:
        leaf = _leaf_text(value)
        for earlier, content in self.observations:
            if leaf is not None and _mentions(content, leaf):
                return f"steps[{earlier}].observation"
        return f"steps[{index}].arguments.{'.'.join(path)}"
