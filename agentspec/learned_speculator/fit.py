"""Fitting: trajectories -> a :class:`~agentspec.learned_speculator.model.SpeculatorModel`.

Every step of every trajectory is one example: its features (:mod:`.features`) and the normalised next call
(:mod:`.targets`; the end of the trajectory is the target ``<end>``).  From them:

* **words**: the task-text words and pairs with the most mutual information about the next call;
* **rules**: an ordered decision list, learned greedily: the condition (one feature, or a history feature and
  one more) and target with the best score on the examples no earlier rule covers becomes the next rule, until
  none is right at least :data:`MIN_HITS` times (or none scores above a floor); features that hold on the same
  examples make one condition (:func:`_distinct_features`: a look-ahead record's hundreds of fields are a few
  sets).  Learned twice: with look-ahead
  features, scored by Laplace precision ``(hits + 1) / (covered + 2)`` while more often right than wrong; over
  history features only, scored by the pessimistic ``hits / (covered + 2)`` with no floor (see
  :data:`HISTORY_SCORE`);
* **n-grams**: next-target counts after the last two calls, the last call, and none (the back-off);
* **sources**: per (tool, argument) and per (target, argument), every source that gave the real value (a
  ``fresh`` one too: the next item of a list not yet used), ranked by precision where it had a value
  (:func:`keep_sources`: some that need no look-ahead kept too, a constant after the data flow that agrees with
  it);
* **once**: the targets whose calls are (almost) never repeated (:func:`once_targets`);
* **probes**: the look-ahead calls whose results a rule or a source uses.

Trajectories of real agents (:mod:`.trajectories`) come in two views where a user took part: every call in the
order made, and the agent's own calls alone.

Deterministic: ties are broken by the features' text, so fitting twice gives the same tables.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from agentspec.learned_speculator.features import (
    flow_features,
    history_features,
    lookahead_features,
    text_words,
    word_features,
)
from agentspec.learned_speculator.lookahead import Probe, with_readers
from agentspec.learned_speculator.model import RankedSource, Rule, SpeculatorModel, ngram_contexts
from agentspec.learned_speculator.sources import (
    KIND_ORDER,
    Context,
    Slot,
    Source,
    TypedValues,
    candidate_sources,
    evaluate,
)
from agentspec.learned_speculator.targets import END, Target
from agentspec.learned_speculator.trajectories import Trajectory
from agentspec.normalize import Normalizer
from agentspec.types import canonical_json

FIT_REVISION = 5
"""Bumped when the same inputs fit different tables (2: history rules scored by :func:`pessimistic`; 3: sources
kept by :func:`keep_sources`, and numbers of free text as sources; 4: a bench's tools now answer in other
words, and look-ahead features read tool replies; 5: sources per target and fresh list items, targets made once,
flow features, one condition per set of examples), so a cached fit
(:func:`agentspec.learned_speculator.runs.fitted_for`) is refitted; the file's format is unchanged."""
MAX_WORDS = 48
MIN_HITS = 2
MAX_RULES = 400
MAX_SOURCES = 4
"""Sources kept per (tool, argument): the first available one is used."""
ONCE_REPEATS = 0.1
"""A target whose calls repeat an earlier one at most this share of the time is guessed once per value."""
HISTORY_ANCHORS = ("last:", "pos:", "w:")
"""History features a two-feature condition is built around (without look-ahead: the last call, how many were
made, a task-text word; ``made:`` pairs fitted the training tasks' fault combinations, not the workflow).
Chosen by 5-fold cross-validation on the train split (``experiments/learned_speculator.md``)."""
LOOKAHEAD_ANCHORS: tuple[str, ...] = ("last:", "w:")
"""With look-ahead, pairs around the last call or a task-text word: what the fork shows, in this kind of task or
after that call (cross-validated on the train split, like every choice here)."""
LOOKAHEAD_DROP = ("pos:", "made:")
"""Features the look-ahead rules do without: with the state in view, how many and which calls were made
only memorise the training tasks' combinations (cross-validated)."""


@dataclass(frozen=True)
class Example:
    """One step: its features (look-ahead ones apart) and its target."""

    history: frozenset[str]
    lookahead: frozenset[str]
    words: frozenset[str]
    target: str


def _entropy(counts: Iterable[int]) -> float:
    values = [c for c in counts if c]
    total = sum(values)
    return -sum(c / total * math.log2(c / total) for c in values) if total else 0.0


def choose_words(texts: Sequence[frozenset[str]], targets: Sequence[str], limit: int = MAX_WORDS) -> list[str]:
    """The words with the most mutual information about the target, over examples (``texts[i]``: example i's
    words); words every example has tell nothing."""
    base = _entropy(Counter(targets).values())
    having: dict[str, Counter[str]] = defaultdict(Counter)
    for words, target in zip(texts, targets, strict=True):
        for word in words:
            having[word][target] += 1
    total, everything = len(targets), Counter(targets)
    scored = []
    for word, with_word in having.items():
        n_with = sum(with_word.values())
        if n_with == total:
            continue
        without = everything - with_word
        conditional = (n_with * _entropy(with_word.values()) + (total - n_with) * _entropy(without.values())) / total
        gain = base - conditional
        if gain > 1e-9:
            scored.append((-round(gain, 12), word))
    return sorted(word for _, word in sorted(scored)[:limit])


def _conditions(features: frozenset[str], anchor_prefixes: tuple[str, ...]) -> list[tuple[str, ...]]:
    singles = sorted(features)
    anchors = [f for f in singles if anchor_prefixes and f.startswith(anchor_prefixes)]
    pairs = {tuple(sorted((a, f))) for a in anchors for f in singles if f != a}
    return [(f,) for f in singles] + sorted(pairs)


def _distinct_features(examples: Sequence[tuple[frozenset[str], str]], min_hits: int) -> frozenset[str]:
    """The features worth a condition: seen at least ``min_hits`` times, and one per set of examples that have
    it (the first by text): features that always come together (most fields of a look-ahead's record) make the
    same rules, and the first of them is the one the tie-break would pick."""
    having: dict[str, list[int]] = defaultdict(list)
    for index, (features, _) in enumerate(examples):
        for feature in features:
            having[feature].append(index)
    first: dict[tuple[int, ...], str] = {}
    for feature in sorted(having):
        if len(having[feature]) >= min_hits:
            first.setdefault(tuple(having[feature]), feature)
    return frozenset(first.values())


RuleScore = Callable[[int, int], float]
"""A rule's score from its ``(hits, covered)`` on the examples no earlier rule covers: the best goes next."""


def laplace(hits: int, covered: int) -> float:
    """Laplace precision: 0.5 is "right as often as wrong"."""
    return (hits + 1) / (covered + 2)


def pessimistic(hits: int, covered: int) -> float:
    """Precision as if two more covered examples were misses: a rule right 5 of 6 times (0.625) goes before one
    right 2 of 2 (0.5), which Laplace precision puts level (0.75): support counts for more."""
    return hits / (covered + 2)


HISTORY_SCORE: RuleScore = pessimistic
HISTORY_MIN_SCORE = 0.0
"""The history-only rules: ranked by :func:`pessimistic`, and kept down to :data:`MIN_HITS` with no floor, so a
weak but general rule (the usual first call) ranks before the n-gram back-off, which knows no task text (its
empty history predicts the end of the task).  Chosen by 5-fold cross-validation on the train split, exact@1
0.525 -> 0.616 (``experiments/learned_speculator.md``)."""
LOOKAHEAD_SCORE: RuleScore = laplace
LOOKAHEAD_MIN_SCORE = 0.5
"""The look-ahead rules: Laplace precision, only while right more often than wrong."""


def decision_list(examples: Sequence[tuple[frozenset[str], str]], *, anchors: tuple[str, ...] = HISTORY_ANCHORS,
                  min_hits: int = MIN_HITS, max_rules: int = MAX_RULES, score: RuleScore = laplace,
                  min_score: float = 0.5) -> list[Rule]:
    """The ordered rules (see the module docstring), learned greedily on ``(features, target)`` examples; a
    condition is one feature, or a feature starting with one of ``anchors`` and one more.  The next rule is the
    one with the best ``score`` (ties: more hits, fewer features, the condition's text) while that is above
    ``min_score``."""
    kept = _distinct_features(examples, min_hits)
    conditions = [_conditions(features & kept, anchors) for features, _ in examples]
    support: Counter[tuple[str, ...]] = Counter(cond for conds in conditions for cond in conds)
    # A condition seen fewer than ``min_hits`` times can never be a rule: dropped before counting (most pairs).
    conditions = [[cond for cond in conds if support[cond] >= min_hits] for conds in conditions]
    del support
    counts: dict[tuple[str, ...], Counter[str]] = defaultdict(Counter)
    for conds, (_, target) in zip(conditions, examples, strict=True):
        for cond in conds:
            counts[cond][target] += 1
    version: dict[tuple[str, ...], int] = defaultdict(int)
    heap: list[tuple[float, int, int, tuple[str, ...], str, int]] = []

    def push(cond: tuple[str, ...]) -> None:
        c = counts.get(cond)
        if not c:
            return
        covered = sum(c.values())
        target, hits = min(c.items(), key=lambda kv: (-kv[1], kv[0]))
        if hits >= min_hits:
            heapq.heappush(heap, (-score(hits, covered), -hits, len(cond), cond, target, version[cond]))

    for cond in sorted(counts):
        push(cond)
    alive = set(range(len(examples)))
    by_condition: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for index, conds in enumerate(conditions):
        for cond in conds:
            by_condition[cond].append(index)
    rules: list[Rule] = []
    while heap and len(rules) < max_rules:
        negative, negative_hits, _, cond, target, seen_version = heapq.heappop(heap)
        if seen_version != version[cond]:
            continue
        if -negative <= min_score:
            break  # no rule left that scores above the floor
        covered = [i for i in by_condition[cond] if i in alive]
        rules.append(Rule(when=cond, then=target, hits=-negative_hits, covered=len(covered)))
        touched: set[tuple[str, ...]] = set()
        for index in covered:
            alive.discard(index)
            for other in conditions[index]:
                counts[other][examples[index][1]] -= 1
                if counts[other][examples[index][1]] <= 0:
                    del counts[other][examples[index][1]]
                touched.add(other)
        for other in sorted(touched):
            version[other] += 1
            push(other)
    return rules


def _without(features: frozenset[str], prefixes: tuple[str, ...]) -> frozenset[str]:
    return frozenset(f for f in features if not f.startswith(prefixes))


def _examples(trajectories: Sequence[Trajectory], normalizer: Normalizer, words: frozenset[str] | None) -> list[Example]:
    out = []
    typed = TypedValues(normalizer.patterns)

    def is_value(value: str) -> bool:
        return normalizer.slot_type(None, value) is not None

    for trajectory in trajectories:
        keys = [Target.of(normalizer, call).key for call in trajectory.calls]
        text = text_words(trajectory.text)
        values = frozenset(v for found in typed.find(trajectory.text).values() for v in found)
        chosen = word_features(text, words) if words is not None else {f"w:{w}" for w in text}
        for position in range(len(keys) + 1):
            last = trajectory.steps[position - 1][1] if position else None
            history = history_features(keys[:position], last.content if last else None)
            history |= flow_features(values, trajectory.steps[:position], is_value)
            seen = lookahead_features(trajectory.seen(position))
            target = keys[position] if position < len(keys) else END
            out.append(Example(frozenset(history), frozenset(seen), frozenset(chosen), target))
    return out


def _ngrams(trajectories: Sequence[Trajectory], normalizer: Normalizer) -> dict[str, dict[str, int]]:
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for trajectory in trajectories:
        keys = [Target.of(normalizer, call).key for call in trajectory.calls]
        for position in range(len(keys) + 1):
            target = keys[position] if position < len(keys) else END
            for context in ngram_contexts(keys[:position]):
                table[context][target] += 1
    return {context: dict(sorted(counts.items())) for context, counts in sorted(table.items())}


def source_rank(source: Source, hits: int, available: int) -> tuple[float, int, int, str]:
    """The sort key of a slot's sources: precision where available (smoothed), data flow first, then hits."""
    return (-hits / (available + 1), KIND_ORDER[source.kind], -hits, source.key)


def fit_sources(trajectories: Sequence[Trajectory], normalizer: Normalizer, typed: TypedValues) -> dict[str, list[RankedSource]]:
    """Per ``tool.argument`` of every slot argument, and per ``TARGET|argument`` (see
    :attr:`~agentspec.learned_speculator.model.SpeculatorModel.sources`): the sources that gave its value, best first."""
    occurrences: dict[str, list[tuple[Context, str, Slot]]] = defaultdict(list)
    hits: dict[str, Counter[str]] = defaultdict(Counter)
    sources: dict[str, Source] = {}
    for trajectory in trajectories:
        for position, (call, _) in enumerate(trajectory.steps):
            target = Target.of(normalizer, call)
            if not target.slots:
                continue
            context = Context(trajectory.text, trajectory.steps[:position], trajectory.seen(position), typed)
            for name in target.slots:
                value = call.arguments[name]
                candidates = candidate_sources(value, context, (call.name, name))
                for slot in (f"{call.name}.{name}", f"{target.key}|{name}"):
                    occurrences[slot].append((context, _canonical(value), (call.name, name)))
                    for source in candidates:
                        sources.setdefault(source.key, source)
                        hits[slot][source.key] += 1
    out: dict[str, list[RankedSource]] = {}
    for slot in sorted(hits):
        # Availability only for the sources that were ever right (the rest can never be chosen), the most often
        # right of each family: a look-ahead's many copies of an id must not crowd out the history's one.
        by_hits = sorted(hits[slot].items(), key=lambda kv: (-kv[1], kv[0]))
        best = ([kv for kv in by_hits if sources[kv[0]].kind == "lookahead"][: MAX_SOURCES * 4]
                + [kv for kv in by_hits if sources[kv[0]].kind != "lookahead"][: MAX_SOURCES * 4])
        ranked = []
        for key, _ in best:
            source = sources[key]
            available = right = 0
            for context, wanted, where in occurrences[slot]:
                found, value = evaluate(source, context, where)
                available += int(found)
                right += int(found and _canonical(value) == wanted)
            ranked.append(RankedSource(source=source, hits=right, available=available))
        out[slot] = keep_sources(ranked)
    return out


def once_targets(trajectories: Sequence[Trajectory], normalizer: Normalizer) -> list[str]:
    """The targets whose calls repeat an earlier call of their trajectory at most :data:`ONCE_REPEATS` of the
    time (seen :data:`MIN_HITS` times at least): those a speculator does not guess again once made."""
    seen: Counter[str] = Counter()
    repeated: Counter[str] = Counter()
    for trajectory in trajectories:
        made: set[str] = set()
        for call in trajectory.calls:
            key = Target.of(normalizer, call).key
            seen[key] += 1
            repeated[key] += call.canonical() in made
            made.add(call.canonical())
    return sorted(key for key, n in seen.items() if n >= MIN_HITS and repeated[key] <= ONCE_REPEATS * n)


def keep_sources(ranked: Sequence[RankedSource]) -> list[RankedSource]:
    """A slot's sources to keep, in the order prediction tries them: the best few (:func:`source_rank`), the best
    few of those that need no look-ahead (without it, the look-ahead ones are never available), a constant last
    resort when one was ever right, and no constant before a data-flow source that was never wrong where it had a
    value (:data:`MIN_HITS` times at least): on the training data the two agree, and only the data flow follows
    the task's own values."""
    order = sorted(ranked, key=lambda r: source_rank(r.source, r.hits, r.available))
    kept = order[:MAX_SOURCES]
    kept += [r for r in order if r.source.kind != "lookahead" and r not in kept][: MAX_SOURCES - sum(
        r.source.kind != "lookahead" for r in kept)]
    constants = [r for r in order if r.source.kind == "const"]
    if constants and not any(r.source.kind == "const" for r in kept):
        kept.append(constants[0])
    kept.sort(key=lambda r: source_rank(r.source, r.hits, r.available))
    sure = [i for i, r in enumerate(kept) if r.source.data_flow and r.hits == r.available >= MIN_HITS]
    if not sure:
        return kept
    cut = sure[-1] + 1
    return ([r for r in kept[:cut] if r.source.kind != "const"] + [r for r in kept[:cut] if r.source.kind == "const"]
            + kept[cut:])


def _canonical(value: object) -> str:
    return canonical_json(value)


def _used_probes(probes: Sequence[Probe], rules: Sequence[Rule], sources: dict[str, list[RankedSource]]) -> list[Probe]:
    used: set[str] = set()
    keys = sorted((p.key for p in probes), key=len, reverse=True)
    for rule in rules:
        for feature in rule.when:
            if feature.startswith("la:"):
                used.update(k for k in keys if feature.startswith(f"la:{k}|"))
    for ranked in sources.values():
        used.update(r.source.tool for r in ranked if r.source.kind == "lookahead")
    return with_readers(used, probes)


def fit(trajectories: Sequence[Trajectory], normalizer: Normalizer, value_patterns: list[tuple[str, str, str | None]],
        probes: Sequence[Probe] = ()) -> SpeculatorModel:
    """Fit every table on ``trajectories`` (see the module docstring)."""
    trajectories = sorted(trajectories, key=lambda t: (t.task_id, t.source, [c.canonical() for c in t.calls]))
    typed = TypedValues(normalizer.patterns)
    raw = _examples(trajectories, normalizer, None)
    chosen = frozenset(choose_words([e.words for e in raw], [e.target for e in raw]))
    words = sorted(w.removeprefix("w:") for w in chosen)
    examples = [Example(e.history, e.lookahead, e.words & chosen, e.target) for e in raw]
    rules = decision_list([(e.history | e.words, e.target) for e in examples], score=HISTORY_SCORE,
                          min_score=HISTORY_MIN_SCORE)
    with_lookahead = (decision_list([(_without(e.history, LOOKAHEAD_DROP) | e.words | e.lookahead, e.target)
                                     for e in examples], anchors=LOOKAHEAD_ANCHORS, score=LOOKAHEAD_SCORE,
                                    min_score=LOOKAHEAD_MIN_SCORE) if probes else rules)
    sources = fit_sources(trajectories, normalizer, typed)
    targets: dict[str, Target] = {}
    for trajectory in trajectories:
        for call in trajectory.calls:
            target = Target.of(normalizer, call)
            targets.setdefault(target.key, target)
    return SpeculatorModel(
        value_patterns=list(value_patterns),
        targets=dict(sorted(targets.items())),
        words=words,
        rules=rules,
        lookahead_rules=with_lookahead,
        ngrams=_ngrams(trajectories, normalizer),
        sources=sources,
        once=once_targets(trajectories, normalizer),
        probes=_used_probes(probes, with_lookahead, sources),
    )

