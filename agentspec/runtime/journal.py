"""The commit journal: the committed history H and its run-log records, which make commits exactly-once.

Every committed step is logged twice: its intent (an effect id) before live state changes, then the commit with
the state it left (a checkpoint, where the backend can serialise it).  A resumed task adopts the logged steps and
that state, so no committed effect is applied again.  :class:`~agentspec.runtime.executor.ExecutionLoop` decides
*what* commits; this module only records it, and adopts a logged task's steps on resume (with the checks of
:mod:`agentspec.runtime.resume`).
"""

from __future__ import annotations

from collections.abc import Callable

from agentspec.runtime.draft import Source
from agentspec.runtime.policies.protocol import History
from agentspec.runtime.resume import Uncertain, not_done, replay_steps, restore_state
from agentspec.runtime.runlog.records import effect_id
from agentspec.runtime.runlog.replay import TaskLog
from agentspec.runtime.runlog.writer import RunLog
from agentspec.snapshot import Checkpointable, SnapshotBackend
from agentspec.types import Observation, Step, ToolCall

Entry = tuple[ToolCall, Observation, str]
"""One step to record: the call, its observation, its effect id (from :meth:`Journal.intents`)."""


class Journal:
    """One task's committed steps, its count of erroring observations, and its run log (if any)."""

    def __init__(self, backend: SnapshotBackend, log: RunLog | None, task_id: str,
                 elapsed: Callable[[], float] | None = None) -> None:
        self.backend, self.log, self.task_id = backend, log, task_id
        self.to_replay: list[Step] = []
        """Adopted steps a fresh environment must run again before the loop goes on (:meth:`replay`)."""
        self.steps: list[Step] = []
        """The committed history, oldest first (appended to, never replaced: hosts hold this list)."""
        self.errors = 0
        """Observations that were errors, the authority's and the user's tools' (the loop stops at a limit)."""
        self.elapsed = elapsed
        """The task's time so far, logged with each commit (a resumed task's time goes on from it)."""
        self.resumed_at = 0.0
        """The task's time at the last logged commit of a resumed task (0 for a fresh one)."""

    def history(self) -> History:
        return [(s.call, s.observation) for s in self.steps]

    def resume(self, resumed: TaskLog, uncertain: Uncertain = "stop") -> None:
        """Adopt a logged task's steps and the live state after them, so none of their effects is applied again or
        lost (:data:`~agentspec.snapshot.ResumeBy`): restored from the checkpoint, or (a fresh environment) run again
        by :meth:`replay` before the loop goes on, or (the world outside) found there already.

        A call the stopped run started and never confirmed (an intent without its commit) is harmless where the
        state it may have changed is gone; in the world outside, unless it is read-only or idempotent, ``uncertain``
        says what to do: ``stop`` (:class:`ConfigError` naming the call), ``retry`` (the loop goes on and may run it
        again) or ``skip`` (it is recorded as not done, with an error observation saying so).

        Raises :class:`ConfigError` when the log's checkpoint is not trusted data, or when it cannot give back
        the state its steps left."""
        kind = restore_state(self.backend, self.task_id, resumed)
        self.resumed_at = resumed.elapsed_s
        for step in resumed.committed():  # the one reading of a logged task's steps (the API's logged result too)
            self.steps.append(step.model_copy(update={"index": len(self.steps)}))
            self.errors += int(step.observation.error)
        if kind == "replay":
            self.to_replay = list(self.steps)
        if kind == "world" and (skipped := not_done(self.backend, self.task_id, resumed, uncertain)) is not None:
            call, observation = skipped
            (eid,) = self.intents([call], "authority")
            self.record([(call, observation, eid)], "authority")

    async def replay(self) -> None:
        """A fresh environment (``replay``): run the adopted steps' calls again on it, the agent's and its user's,
        in order, each checked against its logged answer (:class:`ConfigError` where one differs: the environment
        does not replay deterministically).  Read-only calls change nothing, so they are not run."""
        steps, self.to_replay = self.to_replay, []
        await replay_steps(self.backend, self.task_id, steps)

    def intents(self, calls: list[ToolCall], source: Source) -> list[str]:
        """Effect ids of the next steps, logged as intents before live state changes."""
        first = len(self.steps)
        if self.log is not None:
            return self.log.intents(self.task_id, first, calls, source)
        return [effect_id(self.task_id, first + i, call) for i, call in enumerate(calls)]

    def record(self, entries: list[Entry], source: Source, macro_id: str | None = None) -> None:
        """Append committed steps (live state already changed) and log them as one commit."""
        first = len(self.steps)
        for call, observation, eid in entries:
            self.steps.append(Step(index=len(self.steps), call=call, observation=observation, source=source,
                                   effect_id=eid, macro_id=macro_id))
            self.errors += int(observation.error)
        if self.log is not None:
            # One record for the batch: a crash leaves all of a macro's steps in the log, or none of them.
            checkpoint = self.backend.checkpoint() if isinstance(self.backend, Checkpointable) else None
            logged = [(first + i, eid, observation) for i, (_, observation, eid) in enumerate(entries)]
            self.log.commit(self.task_id, logged, checkpoint, self.elapsed() if self.elapsed is not None else None)
