"""The commit journal: the committed history H and its run-log records, which make commits exactly-once.

Every committed step is logged twice: its intent (an effect id) before live state changes, then the commit with
the state it left (a checkpoint, where the backend can serialise it).  A resumed task adopts the logged steps and
that state, so no committed effect is applied again.  :class:`~agentspec.runtime.executor.ExecutionLoop` decides
*what* commits; this module only records it.
"""

from __future__ import annotations

from agentspec.errors import ConfigError
from agentspec.runtime.draft import Source
from agentspec.runtime.policies import History
from agentspec.runtime.runlog import RunLog, TaskLog, effect_id
from agentspec.snapshot import Checkpointable, SnapshotBackend
from agentspec.types import Observation, Step, ToolCall

Entry = tuple[ToolCall, Observation, str]
"""One step to record: the call, its observation, its effect id (from :meth:`Journal.intents`)."""


class Journal:
    """One task's committed steps, its count of erroring observations, and its run log (if any)."""

    def __init__(self, backend: SnapshotBackend, log: RunLog | None, task_id: str) -> None:
        self.backend, self.log, self.task_id = backend, log, task_id
        self.steps: list[Step] = []
        """The committed history, oldest first (appended to, never replaced: hosts hold this list)."""
        self.errors = 0
        """Observations that were errors, the authority's and the user's tools' (the loop stops at a limit)."""

    def history(self) -> History:
        return [(s.call, s.observation) for s in self.steps]

    def resume(self, resumed: TaskLog) -> None:
        """Adopt a logged task's steps and the live state after them, so none of their effects is applied again.

        Raises :class:`ConfigError` when the log's checkpoint is not trusted data, or when it cannot give back
        the state its steps left."""
        if resumed.checkpoint is not None:
            if not isinstance(self.backend, Checkpointable):
                raise ConfigError(f"task {self.task_id!r}: the log holds a checkpoint this backend cannot restore")
            self.backend.restore_checkpoint(resumed.checkpoint)
        elif resumed.steps and isinstance(self.backend, Checkpointable):
            raise ConfigError(
                f"task {self.task_id!r}: the log holds {len(resumed.steps)} committed steps but no checkpoint of the "
                "state they left (this environment's state cannot be serialised), so resuming would lose their effects"
            )
        for step in resumed.committed():  # the one reading of a logged task's steps (the API's logged result too)
            self.steps.append(step.model_copy(update={"index": len(self.steps)}))
            self.errors += int(step.observation.error)

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
            self.log.commit(self.task_id, logged, checkpoint)
