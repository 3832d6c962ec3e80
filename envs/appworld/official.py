"""AppWorld's own experiment output layout, written from a run's records, so that ``appworld evaluate`` scores it.

Each scored episode's record keeps the task output AppWorld's evaluation read (``evaluation.end_state``, saved by
the worker when it scored the live state: see :func:`envs.appworld.worker.end_state`).  This module lays those
outputs out as an AppWorld root under ``out`` (``RUN/appworld`` for a run's ``--out RUN``)::

    data/                              links to the entries of the user's data folder, but:
    data/datasets/                     a folder of links to the user's splits, plus EXPERIMENT.txt (its task ids)
    experiments/outputs/EXPERIMENT/
        agentspec.json                 per task: agentspec's reward and what was written for it
        tasks/TASK_ID/dbs/*.jsonl, dbs/model_hashes.json, logs/..., version/...

one experiment per mode (``agentspec_MODE``; trial N > 0: ``agentspec_MODE_trialN``).  So, in AppWorld's venv::

    appworld evaluate agentspec_sequential dev --root RUN/appworld          # the run covered the dev split
    appworld evaluate agentspec_sequential agentspec_sequential --root RUN/appworld   # whatever tasks it played

An episode that failed before it was scored has no end state: its task gets the task's input state (nothing the
agent did was kept), which AppWorld scores as it scores an agent that did nothing, and ``agentspec.json`` says so.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from agentspec.errors import DataError

__all__ = ["EndState", "experiment_name", "write_outputs"]

_NAME = re.compile(r"[A-Za-z0-9][\w.+-]*")
"""A task id or mode name that may name a folder (modes: ``sa``, ``smc+spork``)."""
_PART = re.compile(r"(dbs|logs|version)/[A-Za-z0-9][\w.-]*")
"""A file of a task's output, relative to its folder (never a path out of it)."""


class EndState(BaseModel):
    """A task's output as the worker kept it: database logs as what follows the task input's log of the same
    file (``appended``), other files whole (``files``), logs left out for size (``omitted``)."""

    appended: dict[str, str] = {}
    files: dict[str, str] = {}
    omitted: list[str] = []

    def task_files(self, inputs: Path) -> dict[str, str]:
        """Relative path -> text of every file of the task's output (``inputs``: the task's input ``dbs``)."""
        made = dict(self.files)
        for relpath, tail in self.appended.items():
            made[relpath] = (inputs / relpath.removeprefix("dbs/")).read_text(encoding="utf-8") + tail
        return made


def experiment_name(mode: str, trial: int = 0) -> str:
    """The AppWorld experiment of one mode (and trial) of a run."""
    return f"agentspec_{mode}" if trial == 0 else f"agentspec_{mode}_trial{trial}"


def _end_state(record: Mapping[str, Any], where: str, inputs: Path) -> EndState | None:
    """The record's end state; None for an episode that failed before it was scored.  DataError when a scored
    record has none (it was written before agentspec kept them) or a malformed one."""
    evaluation = record.get("evaluation")
    if not evaluation:
        return None
    given = evaluation.get("end_state") if isinstance(evaluation, Mapping) else None
    if given is None:
        raise DataError(f"{where} was scored but keeps no AppWorld end state (a run from before agentspec kept "
                        "them): run it again to write AppWorld's outputs")
    try:
        state = EndState.model_validate(given)
    except ValidationError as exc:
        raise DataError(f"{where} has a malformed AppWorld end state: {exc.errors()[0]['msg']}") from None
    bad = [p for p in [*state.appended, *state.files] if not _PART.fullmatch(p)]
    if bad:
        raise DataError(f"{where} has an AppWorld end state with a file outside dbs/, logs/, version/: {bad[0]!r}")
    unknown = [p for p in state.appended if not p.startswith("dbs/") or not (inputs / p.removeprefix("dbs/")).is_file()]
    if unknown:
        raise DataError(f"{where} continues a task input log that is not in {inputs}: {unknown[0]!r}")
    return state


def _plan(data: Path, records: Mapping[str, Sequence[Mapping[str, Any]]]
          ) -> dict[str, dict[str, tuple[Mapping[str, Any], EndState | None]]]:
    """Experiment -> task id -> (record, end state), every record checked before anything is written."""
    plan: dict[str, dict[str, tuple[Mapping[str, Any], EndState | None]]] = {}
    for mode, mode_records in records.items():
        if not _NAME.fullmatch(mode):
            raise DataError(f"mode name {mode!r} cannot name an AppWorld experiment")
        for record in mode_records:
            task_id, trial = str(record.get("task_id")), int(record.get("trial") or 0)
            where = f"the {mode} record of AppWorld task {task_id!r} (trial {trial})"
            if not _NAME.fullmatch(task_id) or not (data / "tasks" / task_id / "dbs").is_dir():
                raise DataError(f"{where}: no such task in {data / 'tasks'}")
            tasks = plan.setdefault(experiment_name(mode, trial), {})
            if task_id in tasks:
                raise DataError(f"{where} appears twice: an AppWorld experiment holds one output per task")
            tasks[task_id] = (record, _end_state(record, where, data / "tasks" / task_id / "dbs"))
    return plan


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() or link.is_file():
        link.unlink()
    link.symlink_to(target)


def _link_data(root: Path, data: Path, experiments: Mapping[str, Sequence[str]]) -> None:
    """``root/data``: the user's data through links (never copied), with a dataset file per experiment."""
    mine = root / "data"
    if mine.is_symlink():
        mine.unlink()
    (mine / "datasets").mkdir(parents=True, exist_ok=True)
    for entry in sorted(data.iterdir()):
        if entry.name != "datasets":
            _link(mine / entry.name, entry.resolve())
    for split in sorted((data / "datasets").glob("*.txt")):
        if split.stem not in experiments:
            _link(mine / "datasets" / split.name, split.resolve())
    for name, task_ids in experiments.items():
        dataset = mine / "datasets" / f"{name}.txt"
        if dataset.is_symlink():
            dataset.unlink()
        dataset.write_text("".join(f"{task_id}\n" for task_id in task_ids))


def _write_task(folder: Path, files: Mapping[str, str]) -> None:
    for relpath, text in files.items():
        path = folder / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _write_experiment(folder: Path, data: Path, tasks: Mapping[str, tuple[Mapping[str, Any], EndState | None]]
                      ) -> None:
    if folder.exists():
        shutil.rmtree(folder)  # a fresh experiment: no task of an earlier write is left in it
    manifest: dict[str, Any] = {}
    for task_id, (record, state) in tasks.items():
        inputs = data / "tasks" / task_id / "dbs"
        target = folder / "tasks" / task_id
        if state is None:
            shutil.copytree(inputs, target / "dbs")
            written = "the task's input state: the episode failed before it was scored"
        else:
            _write_task(target, state.task_files(inputs))
            written = "the end state agentspec scored"
        manifest[task_id] = {"reward": record.get("reward"), "error": record.get("error"), "written": written,
                             "omitted": state.omitted if state else []}
    (folder / "agentspec.json").write_text(json.dumps({"tasks": manifest}, indent=2) + "\n")


def write_outputs(root: Path, data: Path, records: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Path]:
    """Write every mode's records (as in ``results.json``) as AppWorld experiments under the AppWorld root
    ``root``, over the user's data folder ``data`` (the one holding ``tasks/``); the experiment folders written.

    Every record is checked first (DataError, nothing written, when one cannot be laid out).
    """
    plan = _plan(data, records)
    outputs = root / "experiments" / "outputs"
    outputs.mkdir(parents=True, exist_ok=True)
    _link_data(root, data, {name: list(tasks) for name, tasks in plan.items()})
    written = []
    for name, tasks in plan.items():
        _write_experiment(outputs / name, data, tasks)
        written.append(outputs / name)
    return written
