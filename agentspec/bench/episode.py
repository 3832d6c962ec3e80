"""One finished episode with its score, and the JSON record ``results.json`` keeps of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agentspec.bench.protocol import Score
from agentspec.errors import AgentSpecError
from agentspec.types import Trajectory

if TYPE_CHECKING:
    from agentspec.runtime.executor import ExecutionResult


@dataclass
class Episode:
    """One finished episode with its score (``evaluation`` is None when the episode failed before scoring)."""

    task_id: str
    trial: int
    trajectory: Trajectory
    evaluation: Score | None
    timings: dict[str, float]
    error: str | None = None
    execution: dict[str, Any] | None = None
    """Speculative-executor details (mode, metrics, committed step sources, timeline) when one ran."""
    ended_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    """When the episode ended (ISO 8601, UTC): an Episode is built once its episode is over and scored."""
    result: ExecutionResult | None = field(default=None, repr=False, compare=False)
    """The executor's own result (committed steps with their sources, metrics, timeline), for callers in this
    process (the Python API); None where the episode failed.  Not part of the record."""
    failure: AgentSpecError | None = field(default=None, repr=False, compare=False)
    """The error recorded as ``error``, for a caller that raises it (the Python API)."""

    @property
    def reward(self) -> float:
        return self.evaluation.reward if self.evaluation else 0.0

    def record(self) -> dict[str, Any]:
        """The JSON record written to results.json."""
        evaluation = self.evaluation.model_dump(mode="json") if self.evaluation else None
        return {
            "task_id": self.task_id,
            "trial": self.trial,
            "reward": self.reward,
            "termination": self.trajectory.termination.value if self.trajectory.termination else None,
            "steps": self.trajectory.steps,
            "num_errors": self.trajectory.num_errors,
            "tool_calls": len(self.trajectory.tool_calls()),
            "evaluation": evaluation,
            "timings": self.timings,
            "error": self.error,
            "execution": self.execution,
            "ended_at": self.ended_at,
            "messages": [m.model_dump(mode="json", exclude_defaults=True) for m in self.trajectory.messages],
        }


@dataclass
class LoggedEpisode:
    """An episode finished by an earlier (interrupted) run, read back from the run log."""

    task_id: str
    reward: float
    error: str | None
    stored: dict[str, Any]

    def record(self) -> dict[str, Any]:
        return self.stored
