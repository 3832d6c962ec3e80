"""A run's results: the one model of ``results.json``, the one place that writes it, and the figures it holds.

Every run, from ``agentspec run`` or :func:`agentspec.run`, ends as one :class:`Results`: the format, the run's
configuration (its :class:`~agentspec.run_spec.RunSpec` as JSON), a summary (the run's settings and each mode's
figures under ``modes``) and each mode's episode records::

    results = Results.load("runs/modes")           # a run folder or its results.json
    results.summary.modes["sa"].reward_mean
    results.episodes["sa"][0].reward
    results.save(out, bench)                       # results.json, and the bench's own formats beside it

Every reader (the report, ``--baseline``, mining and the learned speculator's ``--runs``, the API) reads through
:meth:`Results.load`; only :meth:`Results.save` writes the file.  A file of the previous format
(``agentspec.results/v1``) is read as well: a ``--mode`` run's as it is, a plain run's (one list of episodes) as
one mode named ``plain``.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from math import comb
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from agentspec.bench.protocol import OfficialOutputs
from agentspec.errors import ConfigError, first_problem
from agentspec.stats import percentile
from agentspec.user_files import read_user_file

RESULTS_FILE = "results.json"
RESULTS_FORMAT = "agentspec.results/v2"
"""The ``format`` key at the top of ``results.json``."""
V1_FORMAT = "agentspec.results/v1"
"""The previous format: the same summary and episodes, no ``config``; a plain run's episodes one list."""
PLAIN = "plain"
"""The mode a v1 plain run (tau2's own loop, no ``--mode``) is read as."""


# --- figures ----------------------------------------------------------------------------------


def pass_hat_k(successes_per_task: Sequence[tuple[int, int]]) -> dict[int, float]:
    """pass^k for k = 1..min trials, from (trials, successes) per task: mean of C(c,k)/C(n,k)."""
    if not successes_per_task:
        return {}
    max_k = min(n for n, _ in successes_per_task)
    return {
        k: sum(comb(c, k) / comb(n, k) for n, c in successes_per_task) / len(successes_per_task)
        for k in range(1, max_k + 1)
    }


def termination(record: Mapping[str, Any]) -> str:
    """How an episode ended; ``error`` when it failed before ending (its ``error`` field says why)."""
    return str(record["termination"]) if record.get("termination") else "error"


def summarize(records: Sequence[Mapping[str, Any]], wall_s: float) -> dict[str, Any]:
    """A mode's headline numbers from its episode records: reward mean, pass^k, how episodes ended."""
    per_task: dict[str, list[float]] = defaultdict(list)
    for record in records:
        per_task[str(record["task_id"])].append(float(record["reward"]))
    successes = [(len(r), sum(1 for x in r if abs(x - 1.0) < 1e-6)) for r in per_task.values()]
    return {
        "tasks": len(per_task),
        "episodes": len(records),
        "reward_mean": sum(float(r["reward"]) for r in records) / len(records) if records else 0.0,
        "pass_hat_k": {str(k): v for k, v in pass_hat_k(successes).items()},
        "terminations": dict(Counter(termination(r) for r in records)),
        "failed_episodes": sum(1 for r in records if r.get("error")),
        "resumed_episodes": sum(1 for r in records if (r.get("execution") or {}).get("resumed")),
        "first_error": next((r["error"] for r in records if r.get("error")), None),
        "wall_s": round(wall_s, 3),
    }


def task_time(record: Mapping[str, Any]) -> float:
    """An episode's task time: the executor's (simulated on the virtual clock), else its timings."""
    metrics = (record.get("execution") or {}).get("metrics") or {}
    if "wall_s" in metrics:
        return float(metrics["wall_s"])
    timings = record.get("timings") or {}
    return float(timings.get("simulated_wall_s", timings.get("wall_s", 0.0)))


def _task_times(summary: dict[str, Any], records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A v1 plain run's figures with the task-time figures a mode's summary carries, from its episodes."""
    times = [task_time(r) for r in records]
    if not times:
        return summary
    return {**summary, "mean_task_wall_s": round(sum(times) / len(times), 4),
            "p50_wall_s": round(percentile(times, 0.5), 4), "p95_wall_s": round(percentile(times, 0.95), 4)}


# --- the model --------------------------------------------------------------------------------

# Records and summaries keep what they hold beyond their fields (extra="allow"; a bench's own figures, the
# executor's metrics) and are written back as read (exclude_unset): a field is a promise readers rely on.


class EpisodeRecord(BaseModel):
    """One episode: its score, how it ended, its conversation and, from the executor, its execution details."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    trial: int = 0
    reward: float = 0.0
    termination: str | None = None
    steps: int = 0
    num_errors: int = 0
    tool_calls: int = 0
    evaluation: dict[str, Any] | None = None
    timings: dict[str, Any] = {}
    error: str | None = None
    execution: dict[str, Any] | None = None
    messages: list[dict[str, Any]] = []

    def as_dict(self) -> dict[str, Any]:
        """The record as ``results.json`` holds it."""
        return self.model_dump(mode="json", exclude_unset=True)


class ModeSummary(BaseModel):
    """One mode's figures (:func:`summarize`, the executor's aggregate metrics, the bench's own figures)."""

    model_config = ConfigDict(extra="allow")

    tasks: int = 0
    episodes: int = 0
    reward_mean: float = 0.0
    pass_hat_k: dict[str, float] = {}
    terminations: dict[str, int] = {}
    failed_episodes: int = 0
    first_error: str | None = None
    wall_s: float = 0.0
    mean_task_wall_s: float | None = None
    governor: dict[str, Any] | None = None
    speculators: dict[str, dict[str, int]] | None = None
    """A panel of two or more speculators: per member its ``calls``, ``ends``, ``abstained``, ``ends_right`` and
    ``ends_wrong``, summed over the mode's episodes (each episode's are in its ``execution.metrics``); absent
    with one speculator."""

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class RunSummary(BaseModel):
    """The run's settings and each mode's figures: what ``agentspec run`` prints as its last line."""

    model_config = ConfigDict(extra="allow")

    bench: str
    split: str | None = None
    agent: str | None = None
    modes: dict[str, ModeSummary]
    speedup_vs_sequential: dict[str, float | None] | None = None
    run_wall_s: float | None = None
    official_outputs: list[str] = []
    """The files the bench's own tools read, written beside ``results.json``
    (:class:`~agentspec.bench.protocol.OfficialOutputs`)."""
    vs_baseline: dict[str, Any] | None = None
    """``--baseline``: this run's ratios against an earlier run's mode."""
    macros_out: str | None = None
    """``--macros-out``: where the macro library was saved with its online updates."""

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class Results(BaseModel):
    """A finished run, as ``results.json`` holds it (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    format: str = RESULTS_FORMAT
    config: dict[str, Any] = {}
    """The run's :class:`~agentspec.run_spec.RunSpec`, as JSON."""
    summary: RunSummary
    episodes: dict[str, list[EpisodeRecord]]
    """Mode -> its episode records, in job order."""

    @model_validator(mode="after")
    def _modes_match(self) -> Self:
        if self.format != RESULTS_FORMAT:
            raise ValueError(f"format {self.format!r} is not {RESULTS_FORMAT!r}")
        if set(self.summary.modes) != set(self.episodes):
            raise ValueError("summary.modes does not match the episodes' modes")
        return self

    @classmethod
    def of(cls, config: Mapping[str, Any], summary: Mapping[str, Any],
           episodes: Mapping[str, Sequence[Mapping[str, Any]]]) -> Results:
        """A run's results from its configuration, summary and records (checked as a file would be)."""
        try:
            return cls.model_validate({"config": dict(config), "summary": dict(summary),
                                       "episodes": {mode: list(records) for mode, records in episodes.items()}})
        except ValidationError as exc:  # a writer's bug, said in one line
            raise ConfigError(f"these results do not fit {RESULTS_FORMAT}: {first_problem(exc)}") from exc

    def records(self, mode: str) -> list[dict[str, Any]]:
        """``mode``'s episode records as ``results.json`` holds them."""
        return [record.as_dict() for record in self.episodes[mode]]

    def dump(self) -> dict[str, Any]:
        """The whole file as JSON data."""
        return {"format": self.format, "config": self.config, "summary": self.summary.as_dict(),
                "episodes": {mode: self.records(mode) for mode in self.episodes}}

    def save(self, out: str | Path, bench: object | None = None) -> Path:
        """Write ``out/results.json`` (``out`` is created), after the official files of ``bench`` where it writes
        some (:class:`~agentspec.bench.protocol.OfficialOutputs`, listed in ``summary.official_outputs``); the
        path of ``results.json``."""
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        if isinstance(bench, OfficialOutputs):
            written = bench.write_outputs(folder, {mode: self.records(mode) for mode in self.episodes})
            self.summary.official_outputs = [str(path) for path in written]
        file = folder / RESULTS_FILE
        file.write_text(json.dumps(self.dump(), indent=1), encoding="utf-8")
        return file

    @classmethod
    def load(cls, path: str | Path) -> Results:
        """The results of a run folder or of its ``results.json``; :class:`ConfigError` (one line naming the file)
        when it is missing, unreadable, of another format or malformed."""
        file = results_file(path)
        text = read_user_file(file, "results file")
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{file}: not a readable JSON file ({exc})") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"{file}: not the results.json of an agentspec run (a JSON object is expected)")
        version = raw.get("format")
        if version not in (None, V1_FORMAT, RESULTS_FORMAT):
            raise ConfigError(f"{file}: format {version!r} is not one this agentspec reads ({RESULTS_FORMAT}, "
                              f"{V1_FORMAT})")
        try:
            return cls.model_validate(raw if version == RESULTS_FORMAT else _from_v1(raw))
        except (ValidationError, ValueError) as exc:
            named = f"format {version}" if version else "no format key"
            detail = first_problem(exc) if isinstance(exc, ValidationError) else str(exc)
            raise ConfigError(f"{file}: not the results.json of this agentspec version ({named}; {RESULTS_FORMAT} "
                              f"expected; at {detail})") from exc


def results_file(path: str | Path) -> Path:
    """``path``'s ``results.json`` (``path`` itself when it is a file); :class:`ConfigError` when there is none."""
    given = Path(path)
    if given.is_file():
        return given
    if not given.exists():
        raise ConfigError(f"{given}: no such folder or file")
    file = given / RESULTS_FILE
    if not file.is_file():
        raise ConfigError(f"{given}: no results.json here (give the --out folder of an agentspec run)")
    return file


def _from_v1(raw: dict[str, Any]) -> dict[str, Any]:
    """A v1 file (or one written before the ``format`` key) in this format: a ``--mode`` run's as it is, a plain
    run's episodes as the one mode :data:`PLAIN`; ValueError when it has neither shape."""
    summary, episodes = raw.get("summary"), raw.get("episodes")
    if not isinstance(summary, dict):
        raise ValueError("summary: not an object")
    if isinstance(episodes, dict):
        return {"config": {}, "summary": summary, "episodes": episodes}
    if not isinstance(episodes, list):
        raise ValueError("episodes: neither a list of episode records nor a table of modes")
    if "modes" in summary or "reward_mean" not in summary:
        raise ValueError("summary: a plain run's summary needs reward_mean and no modes")
    figures = set(ModeSummary.model_fields) - {"governor", "speculators", "mean_task_wall_s"}
    mode = {key: value for key, value in summary.items() if key in figures}
    records = [r for r in episodes if isinstance(r, dict)]
    # The figures stay at the top too: a v1 summary's readers (a report's header) find them where they were.
    return {"config": {}, "summary": {**summary, "modes": {PLAIN: _task_times(mode, records)}},
            "episodes": {PLAIN: episodes}}
