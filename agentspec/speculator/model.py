"""A fitted speculator: its tables, and prediction (ranked concrete calls) from them.

Prediction at one step:

1. features (:mod:`.features`) of the task text, the calls so far and, with look-ahead, of what the probes saw;
2. the next targets, ranked: the targets of the ordered rules whose conditions all hold (first match first),
   then the n-gram back-off (last two calls, last call, none);
3. each target made concrete: its slot arguments from their learned sources, best first (a target none of
   whose sources is available here is skipped).

No model runs: a prediction takes tens of microseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from agentspec.normalize import Normalizer, patterns_from_table
from agentspec.speculator.features import history_features, lookahead_features, text_words, word_features
from agentspec.speculator.lookahead import Probe
from agentspec.speculator.sources import Context, Source, TypedValues, evaluate
from agentspec.speculator.targets import END, Target
from agentspec.types import Observation, ToolCall

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


CACHE_SIZE = 4096
"""Entries each per-model cache (call keys, task-text words) keeps: a model lives for the process, its inputs do not."""


def _remember(cache: dict[str, Any], key: str, value: Any) -> None:
    """Put ``key`` in ``cache``, dropping the oldest entry once it holds :data:`CACHE_SIZE`."""
    if len(cache) >= CACHE_SIZE:
        del cache[next(iter(cache))]
    cache[key] = value


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
    """``tool.argument`` -> its sources, best first."""
    probes: list[Probe] = Field(default_factory=list)
    """The look-ahead calls worth running (their results are in a rule or a source)."""
    online: dict[str, dict[str, int]] = Field(default_factory=dict)
    """N-gram counts learned online from a run's finished tasks (:mod:`.online`); empty after a fit."""
    lookahead_cap: int | None = Field(default=None, ge=0)
    """At most this many look-ahead calls per prediction, the probes in this order (``--lookahead-cap``; None:
    all of them).  Wherever the file is used: runs, mining, scoring (which may override it)."""
    _keys: dict[str, str] = PrivateAttr(default_factory=dict)
    _texts: dict[str, set[str]] = PrivateAttr(default_factory=dict)

    @cached_property
    def normalizer(self) -> Normalizer:
        return Normalizer(patterns_from_table(self.value_patterns))

    @cached_property
    def typed(self) -> TypedValues:
        return TypedValues(self.normalizer.patterns)

    @cached_property
    def _chosen(self) -> frozenset[str]:
        return frozenset(self.words)

    # --- features -------------------------------------------------------------------------

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
        if seen is not None:
            features |= lookahead_features(seen)
        return frozenset(features)

    # --- prediction -----------------------------------------------------------------------

    def ranked_targets(self, features: frozenset[str], keys: Sequence[str], *, lookahead: bool, k: int) -> list[str]:
        """Up to ``k`` target keys, best first: matching rules in order, then the n-gram back-off (fitted and
        online counts added); after a last call the fit never saw, the online back-off first."""
        ranked: list[str] = []
        if self.online and keys and f"1:{keys[-1]}" not in self.ngrams:
            # A last call the fit never saw: the rules were learned on other histories; what this run's own
            # tasks did after it ranks first.
            for context in ngram_contexts(keys)[:-1]:
                for target, _ in sorted(self.online.get(context, {}).items(), key=lambda kv: (-kv[1], kv[0])):
                    if target not in ranked:
                        ranked.append(target)
                        if len(ranked) >= k:
                            return ranked
        for rule in self.lookahead_rules if lookahead else self.rules:
            if rule.then not in ranked and all(c in features for c in rule.when):
                ranked.append(rule.then)
                if len(ranked) >= k:
                    return ranked
        for context in ngram_contexts(keys):
            counts = dict(self.ngrams.get(context, {}))
            for target, count in self.online.get(context, {}).items():
                counts[target] = counts.get(target, 0) + count
            for target, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
                if target not in ranked:
                    ranked.append(target)
                    if len(ranked) >= k:
                        return ranked
        return ranked

    def realise(self, key: str, context: Context) -> Guess | None:
        """Target ``key`` as a concrete call at ``context``: each slot argument from its first available source."""
        if key == END:
            return Guess(None, END, True)
        target = self.targets.get(key)
        if target is None:
            return None
        arguments: dict[str, Any] = dict(target.arguments)
        strict = True
        for name in target.slots:
            for ranked in self.sources.get(f"{target.name}.{name}", ()):
                available, value = evaluate(ranked.source, context)
                if available:
                    arguments[name] = value
                    strict = strict and ranked.source.data_flow
                    break
            else:
                return None
        try:
            call = ToolCall(name=target.name, arguments=arguments, id=f"learned_{len(context.history)}")
        except ValueError:
            return None
        return Guess(call, key, strict)

    def predict(self, text: str, history: History, seen: Mapping[str, str] | None = None, *, k: int = 3) -> list[Guess]:
        """Up to ``k`` distinct guesses for the next call after ``history``, best first (``seen``: look-ahead
        observations, probe key -> content; None without look-ahead)."""
        keys = [self.key(call) for call, _ in history]
        features = self.features(text, history, seen)
        context = Context(text, history, seen or {}, self.typed)
        guesses: list[Guess] = []
        calls: set[str] = set()
        # Rank a few more targets than asked: one without an available source is skipped.
        for key in self.ranked_targets(features, keys, lookahead=seen is not None, k=k + 3):
            guess = self.realise(key, context)
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
