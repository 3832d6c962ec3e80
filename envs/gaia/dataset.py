"""The user's own copy of GAIA: find it, read its tasks, read a submission, score it.

GAIA's data is gated on the Hugging Face hub and may not be reshared, so agentspec never ships or
downloads it: the user downloads it and points at the folder with ``--data-dir DIR`` or
``$AGENTSPEC_GAIA_DATA``.  Three layouts are accepted (attachments sit beside their ``metadata.jsonl``)::

    DIR/metadata.jsonl                  one split, named "default" (it also answers to "validation")
    DIR/<split>/metadata.jsonl          e.g. DIR/validation/, DIR/test/
    DIR/2023/<split>/metadata.jsonl     the hub's own layout

Each ``metadata.jsonl`` line is one task with ``task_id``, ``Question`` and ``Level`` (1-3), and optionally
``Final answer`` (``"?"`` or missing in the test split) and ``file_name`` (an attachment; ``""`` = none).
Our own fixtures, never GAIA's lines, may add ``agentspec_gold_calls``: the tool calls an oracle agent makes.

Worked example::

    data = GaiaData.locate("~/gaia")                    # or None: read $AGENTSPEC_GAIA_DATA
    tasks = data.tasks("validation", levels=[1], limit=10)
    answers = read_answers("submission.jsonl")          # {"task_id": ..., "model_answer": ...} per line
    score(tasks, answers)  # {"accuracy": 0.4, "accuracy_by_level": {"1": 0.4}, "scored": 10, "correct": 4}
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentspec.errors import ConfigError, DataError
from agentspec.types import ToolCall
from envs.gaia.scorer import question_scorer

__all__ = ["ENV_VAR", "GaiaData", "GaiaTask", "read_answers", "score"]

ENV_VAR = "AGENTSPEC_GAIA_DATA"
LEVELS = (1, 2, 3)
METADATA = "metadata.jsonl"
FLAT_SPLIT = "default"
# A flat folder holds whichever split the user downloaded; "validation" is the one with answers, so the
# default split name must work on it too.
FLAT_ALIASES = frozenset({FLAT_SPLIT, "validation"})
HUB_YEAR = "2023"
GOLD_CALLS_KEY = "agentspec_gold_calls"

_HOW_TO_GET = (
    "GAIA's data is gated on the Hugging Face hub (gaia-benchmark/GAIA) and is never shipped with agentspec: "
    f"accept its terms there, download it yourself, and pass --data-dir DIR or set {ENV_VAR}=DIR"
)


@dataclass(frozen=True, slots=True)
class GaiaTask:
    """One GAIA question, with its attachment resolved to an absolute path.

    ``answer`` is ``None`` in the test split, whose answers are held back by the leaderboard.
    """

    id: str
    question: str
    level: int
    answer: str | None
    file_name: str | None
    file_path: Path | None
    gold_calls: tuple[ToolCall, ...] = ()


class GaiaData:
    """A GAIA folder on the user's disk; build it with :meth:`locate`."""

    def __init__(self, root: Path, split_files: Mapping[str, Path]) -> None:
        self.root = root
        self._split_files = dict(split_files)
        self._loaded: dict[str, list[GaiaTask]] = {}

    @classmethod
    def locate(cls, data_dir: str | Path | None) -> GaiaData:
        """Open ``data_dir``, else ``$AGENTSPEC_GAIA_DATA``; raise ConfigError saying how to get the data."""
        if data_dir is None or str(data_dir) == "":
            data_dir = os.environ.get(ENV_VAR) or None
        if data_dir is None:
            raise ConfigError(f"no GAIA data folder given: {_HOW_TO_GET}")
        root = Path(data_dir).expanduser().resolve()
        if not root.is_dir():
            raise ConfigError(f"GAIA data folder not found: {root}. {_HOW_TO_GET}")
        split_files = _find_splits(root)
        if not split_files:
            raise ConfigError(
                f"no {METADATA} in {root} (looked for DIR/{METADATA}, DIR/<split>/{METADATA} and "
                f"DIR/{HUB_YEAR}/<split>/{METADATA}). {_HOW_TO_GET}"
            )
        return cls(root, split_files)

    def splits(self) -> list[str]:
        """The split names found, sorted (a flat folder has the one split ``"default"``)."""
        return sorted(self._split_files)

    def tasks(
        self,
        split: str = "validation",
        levels: Sequence[int] | None = None,
        task_ids: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[GaiaTask]:
        """The tasks of ``split``: in file order, or in the order of ``task_ids`` when given.

        ``levels`` keeps only those levels, then ``limit`` keeps the first ``limit`` tasks.  An unknown
        split, task id or level, or a negative limit, raises ConfigError.
        """
        if levels is not None:
            bad = [level for level in levels if level not in LEVELS]
            if bad:
                raise ConfigError(f"GAIA levels are 1, 2 and 3, not {bad[0]!r}")
        if limit is not None and limit < 0:
            raise ConfigError(f"limit must be 0 or more, not {limit}")
        selected = self._all_tasks(split)
        if task_ids is not None:
            selected = _pick(selected, task_ids, split)
        if levels is not None:
            selected = [task for task in selected if task.level in levels]
        return selected if limit is None else selected[:limit]

    def _all_tasks(self, split: str) -> list[GaiaTask]:
        name = self._split_name(split)
        if name not in self._loaded:
            self._loaded[name] = _read_metadata(self._split_files[name])
        return self._loaded[name]

    def _split_name(self, split: str) -> str:
        if split in self._split_files:
            return split
        if list(self._split_files) == [FLAT_SPLIT] and split in FLAT_ALIASES:
            return FLAT_SPLIT
        known = ", ".join(self.splits())
        raise ConfigError(f"GAIA split {split!r} not found in {self.root}; the splits there are: {known}")


def _find_splits(root: Path) -> dict[str, Path]:
    """Map split names to their ``metadata.jsonl`` for the first layout that matches ``root``."""
    if (root / METADATA).is_file():
        return {FLAT_SPLIT: root / METADATA}
    for parent in (root / HUB_YEAR, root):
        found = _split_folders(parent)
        if found:
            return found
    return {}


def _split_folders(parent: Path) -> dict[str, Path]:
    """``{folder name: its metadata.jsonl}`` for each direct subfolder of ``parent`` that has one."""
    if not parent.is_dir():
        return {}
    return {child.name: child / METADATA for child in sorted(parent.iterdir()) if (child / METADATA).is_file()}


def _pick(tasks: list[GaiaTask], task_ids: Sequence[str], split: str) -> list[GaiaTask]:
    by_id = {task.id: task for task in tasks}
    missing = [task_id for task_id in task_ids if task_id not in by_id]
    if missing:
        known = list(by_id)
        shown = ", ".join(known[:5]) + (f", ... ({len(known)} in all)" if len(known) > 5 else "")
        raise ConfigError(f"GAIA task {missing[0]!r} is not in split {split!r}; its tasks are: {shown}")
    return [by_id[task_id] for task_id in task_ids]


def _json_lines(path: Path, parse: Callable[[str], Any] = json.loads) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed value)`` for each non-blank line; a line ``parse`` refuses raises DataError."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = parse(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path} line {number}: not valid JSON ({exc.msg})") from exc
        except ValueError as exc:  # what ``parse`` refuses beyond the JSON grammar
            raise DataError(f"{path} line {number}: not valid JSON ({exc})") from exc
        except RecursionError:
            # json's decoder recurses once per level: a deeply nested line is refused, not a traceback.
            raise DataError(f"{path} line {number}: nested too deeply to be a GAIA record") from None
        yield number, value


def _read_metadata(path: Path) -> list[GaiaTask]:
    tasks: list[GaiaTask] = []
    seen: set[str] = set()
    for number, record in _json_lines(path):
        where = f"{path} line {number}"
        task = _parse_task(record, path.parent, where)
        if task.id in seen:
            raise DataError(f"{where}: task_id {task.id!r} appears twice")
        seen.add(task.id)
        tasks.append(task)
    return tasks


def _parse_task(record: Any, folder: Path, where: str) -> GaiaTask:
    """One ``metadata.jsonl`` line as a task; ``where`` ("<file> line N") starts every error."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    task_id = _required_text(record, "task_id", where)
    answer = _optional_text(record, "Final answer", where)
    file_name = _optional_text(record, "file_name", where) or None
    file_path = None if file_name is None else _attachment_path(folder, file_name, task_id, where)
    return GaiaTask(
        id=task_id,
        question=_required_text(record, "Question", where),
        level=_level(record, where),
        answer=None if answer is None or answer.strip() == "?" else answer,
        file_name=file_name,
        file_path=file_path,
        gold_calls=_gold_calls(record.get(GOLD_CALLS_KEY, []), task_id, where),
    )


def _attachment_path(folder: Path, file_name: str, task_id: str, where: str) -> Path:
    """The attachment's real path, which must be a file inside ``folder`` (the split's folder).

    A metadata line comes with downloaded data, so it is not trusted to point anywhere else: an absolute
    path, ``..`` or a symlink that leads out of the folder is refused (symlinks inside it are fine).
    """
    try:
        base = folder.resolve(strict=True)
        path = (base / file_name).resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a NUL byte in the name
        problem = f"the attachment {file_name!r} of task {task_id!r} cannot be resolved ({exc})"
        raise DataError(f"{where}: {problem}") from exc
    if not path.is_relative_to(base):
        raise DataError(
            f"{where}: the attachment {file_name!r} of task {task_id!r} leads outside the data folder {base} "
            f"(to {path}); attachments must be files beside {METADATA}"
        )
    if not path.is_file():
        raise DataError(f"GAIA task {task_id!r} names the attachment {file_name!r}, missing at {path}")
    return path


def _required_text(record: dict[str, Any], key: str, where: str) -> str:
    if key not in record:
        raise DataError(f"{where}: missing the required field {key!r}")
    value = record[key]
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: field {key!r} must be a non-empty string, got {value!r}")
    return value


def _optional_text(record: dict[str, Any], key: str, where: str) -> str | None:
    value = record.get(key)
    if value is not None and not isinstance(value, str):
        raise DataError(f"{where}: field {key!r} must be a string, got {value!r}")
    return value


def _level(record: dict[str, Any], where: str) -> int:
    if "Level" not in record:
        raise DataError(f"{where}: missing the required field 'Level'")
    value = record["Level"]
    # Some copies store the level as a string ("1"); accept both spellings, nothing else.
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or value not in LEVELS:
        raise DataError(f"{where}: field 'Level' must be 1, 2 or 3, got {record['Level']!r}")
    return int(value)


def _gold_calls(value: Any, task_id: str, where: str) -> tuple[ToolCall, ...]:
    if not isinstance(value, list):
        raise DataError(f"{where}: field {GOLD_CALLS_KEY!r} must be a list of {{name, arguments}} objects")
    calls = []
    for index, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise DataError(f"{where}: {GOLD_CALLS_KEY}[{index}] needs a string 'name'")
        try:
            # Ids are derived from the task so that loading the same file twice gives identical calls.
            calls.append(ToolCall(name=item["name"], arguments=item.get("arguments", {}), id=f"{task_id}-{index}"))
        except ValidationError as exc:
            problem = exc.errors()[0]["msg"]
            raise DataError(f"{where}: {GOLD_CALLS_KEY}[{index}] is not a valid call ({problem})") from exc
    return tuple(calls)


class _NumberText(str):
    """A JSON number as it is written in the file (``4.50``, ``1e999``), before any float conversion."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; write the answer as a string")


def _parse_answer_line(line: str) -> Any:
    # Numbers keep their text: float("1e999") would turn the answer into "inf". NaN and Infinity are
    # not JSON (Python's json reads them by default) and are refused like any other malformed line.
    return json.loads(line, parse_int=_NumberText, parse_float=_NumberText, parse_constant=_refuse_constant)


def read_answers(path: str | Path) -> dict[str, str]:
    """Read a leaderboard submission: one ``{"task_id": ..., "model_answer": ...}`` object per line.

    Extra keys (``reasoning_trace``...) are ignored; a numeric ``model_answer`` is read as the text it is written
    as (``1e999`` stays ``"1e999"``: GAIA's rules score it, and it equals no numeric answer). A missing or empty
    file, a malformed line (``NaN`` and ``Infinity`` are not JSON) or a task answered twice raises ConfigError
    naming the file and line.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"answers file not found: {path}")
    answers: dict[str, str] = {}
    for number, record in _json_lines(path, _parse_answer_line):
        where = f"{path} line {number}"
        if not isinstance(record, dict):
            raise DataError(f"{where}: expected a JSON object with 'task_id' and 'model_answer'")
        task_id = _required_text(record, "task_id", where)
        if isinstance(task_id, _NumberText):
            raise DataError(f"{where}: field 'task_id' must be a non-empty string, got {task_id}")
        if "model_answer" not in record:
            raise DataError(f"{where}: missing the required field 'model_answer'")
        answer = record["model_answer"]
        if not isinstance(answer, str):
            raise DataError(f"{where}: field 'model_answer' must be a string, got {answer!r}")
        if task_id in answers:
            raise DataError(f"{where}: task {task_id!r} is answered twice")
        answers[task_id] = str(answer)
    if not answers:
        raise DataError(f"{path}: the answers file is empty (expected one JSON object with task_id and model_answer per line)")
    return answers


def score(tasks: Sequence[GaiaTask], answers: Mapping[str, str | None]) -> dict[str, Any]:
    """Score ``answers`` against ``tasks`` with :func:`question_scorer`; an unanswered task is wrong.

    Returns ``{"accuracy", "accuracy_by_level" (levels present only, keys "1".."3"), "scored", "correct"}``::

        >>> t = GaiaTask(id="a", question="2+2?", level=1, answer="4", file_name=None, file_path=None)
        >>> score([t], {"a": "4.0"})
        {'accuracy': 1.0, 'accuracy_by_level': {'1': 1.0}, 'scored': 1, 'correct': 1}
    """
    if not tasks:
        raise ConfigError("no GAIA tasks to score: check the split, level and task-id filters")
    hidden = [task.id for task in tasks if task.answer is None]
    if hidden:
        raise ConfigError(
            f"the test split has no answers (task {hidden[0]!r}): submit your answers file to the GAIA "
            "leaderboard on the Hugging Face hub to score it, or score the validation split here"
        )
    totals: dict[int, list[int]] = {}
    for task in tasks:
        right = task.answer is not None and question_scorer(answers.get(task.id), task.answer)
        counts = totals.setdefault(task.level, [0, 0])
        counts[0] += int(right)
        counts[1] += 1
    correct = sum(right for right, _ in totals.values())
    return {
        "accuracy": correct / len(tasks),
        "accuracy_by_level": {str(level): right / n for level, (right, n) in sorted(totals.items())},
        "scored": len(tasks),
        "correct": correct,
    }
