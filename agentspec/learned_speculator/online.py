"""Learning online: a run's finished tasks update the fitted counts, so later tasks of the run are guessed better.

    learner = OnlineLearner(load("runs/spec.json"))
    learner.learn(task_id, text, steps)          # after each finished task: its committed calls and observations
    learner.artifact().save("runs/spec-2.json")  # the updated speculator (same format, byte-stable)

What is updated (counts only; the ordered rules stay as fitted):

* ``online``: next-target counts after the last two calls, the last call and none (the n-gram contexts),
  from the run's tasks alone.  Where the fit never saw the last call, a history the rules were not learned on,
  these counts rank first (:meth:`SpeculatorModel.ranked_targets`); elsewhere they are added to the fitted
  n-gram back-off;
* ``targets``: a call the fit never saw becomes a target;
* ``sources``: per (tool, argument) each source's hits and availability, and new sources (task text, earlier
  arguments or results) that gave a value.

The learned task ids join ``fitted_on.task_ids``, so scoring still refuses a task the speculator has seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agentspec.learned_speculator.artifact import Artifact
from agentspec.learned_speculator.fit import keep_sources
from agentspec.learned_speculator.model import RankedSource, SpeculatorModel, ngram_contexts
from agentspec.learned_speculator.sources import Context, Slot, candidate_sources, evaluate
from agentspec.learned_speculator.targets import END, Target
from agentspec.learned_speculator.trajectories import Step
from agentspec.runtime.conversation import SAY
from agentspec.types import canonical_json


@dataclass
class OnlineLearner:
    """Holds one run's speculator and updates it from each finished task (:meth:`learn`)."""

    base: Artifact
    learned: list[str] = field(default_factory=list)
    """Task ids learned from, in order."""

    def __post_init__(self) -> None:
        self.model: SpeculatorModel = self.base.model.model_copy(deep=True)

    def learn(self, task_id: str, text: str, steps: Sequence[Step]) -> None:
        """Update the counts from one finished task's committed ``steps`` (its calls and observations; messages to
        the user are left out, as prediction leaves them out of a history)."""
        steps = [step for step in steps if step[0].name != SAY]
        model = self.model
        keys = [model.key(call) for call, _ in steps]
        online = {context: dict(counts) for context, counts in model.online.items()}
        for position in range(len(keys) + 1):
            target = keys[position] if position < len(keys) else END
            for context in ngram_contexts(keys[:position]):
                counts = online.setdefault(context, {})
                counts[target] = counts.get(target, 0) + 1
        model.online = {c: dict(sorted(v.items())) for c, v in sorted(online.items())}
        targets = dict(model.targets)
        sources = {slot: list(ranked) for slot, ranked in model.sources.items()}
        for position, (call, _) in enumerate(steps):
            step_target = Target.of(model.normalizer, call)
            targets.setdefault(step_target.key, step_target)
            step_context = Context(text, steps[:position], {}, model.typed)
            for name in step_target.slots:
                slot = f"{call.name}.{name}"
                sources[slot] = _updated(sources.get(slot, []), call.arguments[name], step_context, (call.name, name))
        model.targets = dict(sorted(targets.items()))
        model.sources = dict(sorted(sources.items()))
        self.learned.append(task_id)

    def artifact(self) -> Artifact:
        """The updated speculator, with the learned tasks added to what it was fitted on."""
        base = self.base.fitted_on
        own = None if base.own_task_ids is None else sorted(set(base.own_task_ids) | set(self.learned))
        fitted_on = base.model_copy(update={
            "task_ids": sorted(set(base.task_ids) | set(self.learned)), "own_task_ids": own,
            "online_tasks": base.online_tasks + len(self.learned)})
        return self.base.model_copy(update={"fitted_on": fitted_on, "model": self.model})


def _updated(ranked: list[RankedSource], value: object, context: Context, slot: Slot) -> list[RankedSource]:
    """A slot's sources after one more occurrence of ``value`` at ``context``: each known source's counts, plus
    the sources that gave the value and were not known; best first, the best few kept (and a constant)."""
    wanted = canonical_json(value)
    out: list[RankedSource] = []
    known = set()
    for r in ranked:
        found, got = evaluate(r.source, context, slot)
        known.add(r.source.key)
        out.append(RankedSource(source=r.source, hits=r.hits + int(found and canonical_json(got) == wanted),
                                available=r.available + int(found)))
    out += [RankedSource(source=s, hits=1, available=1) for s in candidate_sources(value, context, slot)
            if s.key not in known and s.kind != "lookahead"]
    return keep_sources(out)
