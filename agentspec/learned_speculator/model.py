"""A fitted speculator: its tables, and prediction (ranked concrete calls) from them.

Prediction at one step:

1. features (:mod:`.features`) of the task text, the calls so far and, with look-ahead, of what the probes saw;
2. the next targets, ranked: the targets of the ordered rules whose conditions all hold (first match first;
   with look-ahead, the history rules and the look-ahead rules merged by their precision), then the n-gram
   back-off (last two calls, last call, none); the end of the task first only where it is sure
   (:data:`END_PRECISION`);
3. each target made concrete: its slot arguments from their learned sources, best first, the target's own
   sources before its tool's, a value kept only where the call stays an instance of the target (a target none
   of whose sources is available here is skipped); a target made once (:attr:`SpeculatorModel.once`) takes the
   first values whose call was not made yet (the next line of a list), and is skipped when every one was;
4. with ``tools``, only guesses of those tools (normal mode: the agent's, not the user's).

No model runs: a prediction takes well under a millisecond.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from agentspec.learned_speculator.features import (
    flow_features,
    history_features,
    lookahead_features,
    text_words,
    word_features,
)
from agentspec.learned_speculator.lookahead import Probe
from agentspec.learned_speculator.sources import Context, Source, TypedValues, evaluate
from agentspec.learned_speculator.targets import END, Target
from agentspec.normalize import Normalizer, patterns_from_table
from agentspec.types import Observation, ToolCall, canonical_json

History = Sequence[tuple[ToolCall, Observation | None]]


class Rule(BaseModel):
    """If every feature of ``when`` holds, the next call is target ``then`` (``hits`` of ``covered`` in training)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    when: tuple[str, ...]
    then: str
    hits: int
    covered: int


class RankedSource(BaseModel):
    """A source of one (tool, argument), with how often it was right (``hits``) where it had a value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Source
    hits: int
    available: int


@dataclass(frozen=True)
class Guess:
    """One ranked guess: the call (None: the task is over), its target, and whether every task-specific
    argument came from data flow (``strict``), not from a constant."""

    call: ToolCall | None
    target: str
    strict: bool


RANK_SPARE = 6
"""Targets ranked beyond the guesses asked for: those not realisable here (no source, or made once already) are
skipped."""
MAX_COMBINATIONS = 16
"""Combinations of argument values a target's realisation tries (for a call not made yet)."""
CACHE_SIZE = 4096
"""Entries each per-model cache (call keys, task-text words) keeps: a model lives for the process, its inputs do not."""


def _remember(cache: dict[str, Any], key: str, value: Any) -> None:
    """Put ``key`` in ``cache``, dropping the oldest entry once it holds :data:`CACHE_SIZE`."""
    if len(cache) >= CACHE_SIZE:
        del cache[next(iter(cache))]
    cache[key] = value


END_PRECISION = 0.75
"""The end of the task is guessed first only from a rule (or back-off context) right this often: a scored step is
always a call, and a real agent goes on where a rule learned on other agents would stop."""


def rule_confidence(rule: Rule) -> float:
    """A rule's precision where it was learned (Laplace-smoothed): how far its guess is to be trusted."""
    return (rule.hits + 1) / (rule.covered + 2)


def _merged(first: list[tuple[str, float]], second: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Two ranked lists merged by confidence, ``first``'s on ties; each keeps its own order."""
    out: list[tuple[str, float]] = []
    i = j = 0
    while i < len(first) or j < len(second):
        if j >= len(second) or (i < len(first) and first[i][1] >= second[j][1]):
            out.append(first[i])
            i += 1
        else:
            out.append(second[j])
            j += 1
    return out


def ngram_contexts(keys: Sequence[str]) -> list[str]:
    """The back-off contexts after ``keys`` (normalised calls), longest first."""
    contexts = []
    if len(keys) >= 2:
        contexts.append(f"2:{keys[-2]}>{keys[-1]}")
    if keys:
        contexts.append(f"1:{keys[-1]}")
    contexts.append("0:")
    return contexts


class SpeculatorModel(BaseModel):
    """The fitted tables (see the module docstring).  Everything in it is data: no bench or tool is built in."""

    model_config = ConfigDict(extra="forbid")

    value_patterns: list[tuple[str, str, str | None]] = Field(default_factory=list)
    """The bench's value patterns (the normaliser adds its generic ones)."""
    targets: dict[str, Target] = Field(default_factory=dict)
    words: list[str] = Field(default_factory=list)
    """Task-text words and word pairs chosen as features (most informative about the next call)."""
    rules: list[Rule] = Field(default_factory=list)
    """Ordered rules over history features only."""
    lookahead_rules: list[Rule] = Field(default_factory=list)
    """Ordered rules that may also use look-ahead features."""
    ngrams: dict[str, dict[str, int]] = Field(default_factory=dict)
    sources: dict[str, list[RankedSource]] = Field(default_factory=dict)
    """``tool.argument`` -> its sources, best first; ``TARGET|argument`` (a target's key) -> the sources of that
    target's argument, tried first (a details lookup of a plan and of a bill read different fields)."""
    once: list[str] = Field(default_factory=list)
    """Targets whose calls the trajectories (almost) never repeated: a call of one of them already made is not
    guessed again; the next value of its sources is (the next line of a list not yet looked at)."""
    probes: list[Probe] = Field(default_factory=list)
    """The look-ahead calls worth running (their results are in a rule or a source)."""
    online: dict[str, dict[str, int]] = Field(default_factory=dict)
    """N-gram counts learned online from a run's finished tasks (:mod:`.online`); empty after a fit."""
    lookahead_cap: int | None = Field(default=None, ge=0)
    """At most this many look-ahead calls per prediction, the probes in this order (``--lookahead-cap``; None:
    all of them).  Wherever the file is used: runs, mining, scoring (which may override it)."""
    _keys: dict[str, str] = PrivateAttr(default_factory=dict)
    _texts: dict[str, set[str]] = PrivateAttr(default_factory=dict)
    _typed_texts: dict[str, frozenset[str]] = PrivateAttr(default_factory=dict)

    @cached_property
    def normalizer(self) -> Normalizer:
        return Normalizer(patterns_from_table(self.value_patterns))

    @cached_property
    def typed(self) -> TypedValues:
        return TypedValues(self.normalizer.patterns)

    @cached_property
    def _chosen(self) -> frozenset[str]:
        return frozenset(self.words)

    @cached_property
    def _once(self) -> frozenset[str]:
        return frozenset(self.once)

    # --- features -------------------------------------------------------------------------

    def text_values(self, text: str) -> frozenset[str]:
        """The typed values (ids, phone numbers...) of a task text (cached)."""
        found = self._typed_texts.get(text)
        if found is None:
            found = frozenset(v for values in self.typed.find(text).values() for v in values)
            _remember(self._typed_texts, text, found)
        return found

    def is_value(self, value: str) -> bool:
        """Whether a string is a task-specific value (a slot type of the normaliser: an id, a date...)."""
        return self.normalizer.slot_type(None, value) is not None

    def key(self, call: ToolCall) -> str:
        """The normalised key of a call made (cached: histories repeat)."""
        canonical = call.canonical()
        found = self._keys.get(canonical)
        if found is None:
            found = Target.of(self.normalizer, call).key
            _remember(self._keys, canonical, found)
        return found

    def features(self, text: str, history: History, seen: Mapping[str, str] | None) -> frozenset[str]:
        """Every feature of one step (look-ahead ones only when ``seen`` is given)."""
        words = self._texts.get(text)
        if words is None:
            words = word_features(text_words(text), self._chosen)
            _remember(self._texts, text, words)
        last = history[-1][1] if history else None
        features = history_features([self.key(call) for call, _ in history], last.content if last else None)
        features |= words
        features |= flow_features(self.text_values(text), history, self.is_value)
        if seen is not None:
            features |= lookahead_features(seen)
        return frozenset(features)

    # --- prediction -----------------------------------------------------------------------

    def ranked_targets(self, features: frozenset[str], keys: Sequence[str], *, lookahead: bool, k: int,
                       tools: Collection[str] | None = None) -> list[str]:
        """Up to ``k`` target keys, best first: matching rules, then the n-gram back-off (fitted and online counts
        added); after a last call the fit never saw, the online back-off first.

        With look-ahead, the history rules and the look-ahead rules that match are merged by their precision
        (:func:`rule_confidence`): what the fork shows decides only where it is surer than the history (a real
        agent checks before it fixes, whatever the fork shows).  The end of the task ranks first only from a
        rule right at least :data:`END_PRECISION` of the time, else after the next call guessed.  With ``tools``,
        only targets of those tools (and the end)."""
        ranked: list[str] = []
        deferred: list[str] = []

        def add(target: str, confidence: float) -> bool:
            if tools is not None and target != END and (target not in self.targets or self.targets[target].name
                                                        not in tools):
                return False
            if target == END and confidence < END_PRECISION and not ranked:
                if END not in deferred:
                    deferred.append(END)
                return False
            if target not in ranked:
                ranked.append(target)
                if deferred and target != END:
                    ranked.extend(t for t in deferred if t not in ranked)
                    deferred.clear()
            return len(ranked) >= k

        if self.online and keys and f"1:{keys[-1]}" not in self.ngrams:
            # A last call the fit never saw: the rules were learned on other histories; what this run's own
            # tasks did after it ranks first.
            for context in ngram_contexts(keys)[:-1]:
                for target, _ in sorted(self.online.get(context, {}).items(), key=lambda kv: (-kv[1], kv[0])):
                    if add(target, 1.0):
                        return ranked[:k]
        matching = [(rule.then, rule_confidence(rule)) for rule in (self.lookahead_rules if lookahead else self.rules)
                    if all(c in features for c in rule.when)]
        if lookahead and self.lookahead_rules is not self.rules:
            history = [(rule.then, rule_confidence(rule)) for rule in self.rules if all(c in features for c in rule.when)]
            matching = _merged(history, matching)
        for target, confidence in matching:
            if add(target, confidence):
                return ranked[:k]
        for context in ngram_contexts(keys):
            counts = dict(self.ngrams.get(context, {}))
            for target, count in self.online.get(context, {}).items():
                counts[target] = counts.get(target, 0) + count
            total = sum(counts.values())
            for target, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
                if add(target, count / total):
                    return ranked[:k]
        ranked.extend(t for t in deferred if t not in ranked)
        return ranked[:k]

    def realise(self, key: str, context: Context, made: set[str] | None = None) -> Guess | None:
        """Target ``key`` as a concrete call at ``context``: each slot argument from its first available source
        whose value keeps the call an instance of the target; for a target in :attr:`once`, the first such call
        not in ``made`` (canonical calls made so far), None when every one was made."""
        if key == END:
            return Guess(None, END, True)
        target = self.targets.get(key)
        if target is None:
            return None
        options: list[list[tuple[Any, bool]]] = []
        for name in target.slots:
            values = self._values(key, target, name, context)
            if not values:
                return None
            options.append(values)
        once = made is not None and key in self._once
        for number, combination in enumerate(itertools.product(*options)):
            if number >= MAX_COMBINATIONS:
                break
            arguments: dict[str, Any] = dict(target.arguments)
            arguments.update((name, value) for name, (value, _) in zip(target.slots, combination, strict=True))
            try:
                call = ToolCall(name=target.name, arguments=arguments, id=f"learned_{len(context.history)}")
            except ValueError:
                continue
            if target.slots and self.key(call) != key:
                continue  # a value of another type (a line's id where the target reads a plan)
            if once and made is not None and call.canonical() in made:
                continue
            return Guess(call, key, all(flow for _, flow in combination))
        return None

    def _values(self, key: str, target: Target, name: str, context: Context) -> list[tuple[Any, bool]]:
        """The distinct values the sources of ``name`` give at ``context``, best first, each with whether it
        came from data flow: the target's own sources, then the tool's."""
        out: dict[str, tuple[Any, bool]] = {}
        for slot in (f"{key}|{name}", f"{target.name}.{name}"):
            for ranked in self.sources.get(slot, ()):
                available, value = evaluate(ranked.source, context, (target.name, name))
                if available:
                    out.setdefault(canonical_json(value), (value, ranked.source.data_flow))
        return list(out.values())

    def predict(self, text: str, history: History, seen: Mapping[str, str] | None = None, *, k: int = 3,
                tools: Collection[str] | None = None) -> list[Guess]:
        """Up to ``k`` distinct guesses for the next call after ``history``, best first (``seen``: look-ahead
        observations, probe key -> content; None without look-ahead), calls of ``tools`` only when given."""
        keys = [self.key(call) for call, _ in history]
        features = self.features(text, history, seen)
        context = Context(text, history, seen or {}, self.typed)
        guesses: list[Guess] = []
        calls: set[str] = set()
        made = {call.canonical() for call, _ in history}
        # Rank more targets than asked: one without an available source, or made already, is skipped.
        for key in self.ranked_targets(features, keys, lookahead=seen is not None, k=k + RANK_SPARE, tools=tools):
            guess = self.realise(key, context, made)
            if guess is None:
                continue
            canonical = guess.call.canonical() if guess.call is not None else END
            if canonical in calls:
                continue
            calls.add(canonical)
            guesses.append(guess)
            if len(guesses) >= k:
                break
        return guesses
