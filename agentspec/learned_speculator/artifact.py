"""The speculator file: one readable JSON document, versioned, the same bytes when fitted twice.

    {"format": "agentspec.speculator/v1", "seed": 0,
     "fitted_on": {"bench": "...", "split": "train", "sources": [...], "task_ids": [...],
                   "trajectories": 74, "calls": 612, "inputs_sha256": "..."},
     "model": {... the fitted tables, see SpeculatorModel ...}}

``fitted_on.task_ids`` is what scoring checks so that no scored task was in the fit.  No time or path of the
machine is recorded; every table is sorted.  :func:`load` turns anything else (not JSON, another format, a
malformed table) into one :class:`~agentspec.errors.ConfigError` line.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

import regex
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentspec.errors import ConfigError, first_problem
from agentspec.learned_speculator.model import SpeculatorModel
from agentspec.learned_speculator.trajectories import Trajectory
from agentspec.types import canonical_json

FORMAT = "agentspec.speculator/v1"


class FittedOn(BaseModel):
    """What a speculator was fitted on."""

    model_config = ConfigDict(extra="forbid")

    bench: str | None = None
    split: str | None = None
    sources: list[str] = Field(default_factory=list)
    task_ids: list[str] = Field(default_factory=list)
    trajectories: int = 0
    calls: int = 0
    inputs_sha256: str = ""
    online_tasks: int = 0
    """Tasks learned online after the fit (``--learn-online``; their ids are in ``task_ids`` too)."""
    recordings: dict[str, list[str]] = Field(default_factory=dict)
    """Recorded runs of real agents fitted on (sha256 of the file -> its tasks; their ids are in ``task_ids`` too)."""
    own_task_ids: list[str] | None = None
    """The tasks whose gold calls or agentspec runs were fitted on: ``task_ids`` less those only a recording
    brought (None in files from before recordings: all of ``task_ids``)."""

    def check_unseen(self, scored: Sequence[str], recording: str | None = None) -> None:
        """Refuse to score or run ``scored`` tasks the fit has seen (:class:`ConfigError`).  Against a recording
        (its sha256), another recording's episodes of the same tasks are allowed (leave one recording out): only
        that recording itself, and the tasks of the gold calls and agentspec runs, may not have been fitted on."""
        if recording is None:
            seen, what = set(self.task_ids), "fit"
        elif recording in self.recordings:
            raise ConfigError("the speculator was fitted on this very recording: fit it on other recordings "
                              "(leave this one out) to score or replay it")
        else:
            seen, what = set(self.task_ids if self.own_task_ids is None else self.own_task_ids), "gold or run fit"
        overlap = sorted(seen & set(scored))
        if overlap:
            raise ConfigError(f"{len(overlap)} of the {len(set(scored))} scored tasks were in the speculator's {what} "
                              f"(first: {overlap[0]}): score on tasks it was not fitted on")


class Artifact(BaseModel):
    """A fitted speculator with its provenance."""

    model_config = ConfigDict(extra="forbid")

    format: str = FORMAT
    seed: int = 0
    fitted_on: FittedOn = Field(default_factory=FittedOn)
    model: SpeculatorModel

    def dumps(self) -> str:
        """The file's text: sorted keys, one-space indent, a final newline."""
        return json.dumps(self.model_dump(mode="json"), indent=1, sort_keys=True, ensure_ascii=False) + "\n"

    def save(self, path: str | Path) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.dumps(), encoding="utf-8")


def inputs_digest(trajectories: Sequence[Trajectory]) -> str:
    """sha256 of what was fitted on: each trajectory's task, text, calls, observations and look-ahead, in order."""
    digest = hashlib.sha256()
    for t in sorted(trajectories, key=lambda t: (t.task_id, t.source, [c.canonical() for c in t.calls])):
        steps = [[call.canonical(), obs.content if obs else None] for call, obs in t.steps]
        digest.update(canonical_json([t.task_id, t.text, steps, [dict(sorted(s.items())) for s in t.lookahead]]).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def load(path: str | Path) -> Artifact:
    """Read a speculator file; :class:`ConfigError` (one line) when it is missing, malformed or foreign."""
    file = Path(path)
    if file.exists() and not file.is_file():  # a folder, or a FIFO that would block the read forever
        raise ConfigError(f"{file} is not a speculator file: not a regular file")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read speculator {file}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file} is not a speculator file: not JSON ({exc})".replace("\n", " ")) from None
    except RecursionError:
        raise ConfigError(f"{file} is not a speculator file: its JSON is nested too deep to read") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ConfigError(f"{file} is not a speculator file: format {found!r}, expected {FORMAT!r}")
    try:
        artifact = Artifact.model_validate(data)
    except RecursionError:
        raise ConfigError(f"{file} is a malformed speculator file: nested too deep") from None
    except ValidationError as exc:
        raise ConfigError(f"{file} is a malformed speculator file: {first_problem(exc)}") from None
    try:
        # Compile what prediction derives from the tables now, so a bad pattern fails here as one line, not
        # mid-run with a traceback.
        _ = artifact.model.typed._compiled
    except (re.error, regex.error, ValueError, TypeError) as exc:
        raise ConfigError(f"{file} is a malformed speculator file: model.value_patterns: {exc}".replace("\n", " ")) from None
    return artifact
