"""The user's GAIA folder: layouts, errors, filters, gold calls, answer files and scoring (made-up data)."""

from __future__ import annotations

import doctest
import json
from pathlib import Path
from typing import Any

import pytest

import envs.gaia.dataset
from agentspec.errors import ConfigError
from agentspec.types import ToolCall
from envs.gaia.dataset import GaiaData, GaiaTask, read_answers, score


def line(task_id: str, level: Any = 1, answer: str | None = "blue", **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"task_id": task_id, "Question": f"What colour is {task_id}?", "Level": level}
    if answer is not None:
        record["Final answer"] = answer
    return record | extra


def write_split(folder: Path, records: list[Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "metadata.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


FOUR = [line("t1", 1), line("t2", 2), line("t3", 1), line("t4", 3)]


@pytest.fixture(autouse=True)
def no_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTSPEC_GAIA_DATA", raising=False)


# --- layouts ----------------------------------------------------------------------------------------------


def test_flat_folder_is_split_default_and_answers_to_validation(tmp_path: Path) -> None:
    write_split(tmp_path, FOUR)
    data = GaiaData.locate(tmp_path)
    assert data.splits() == ["default"]
    assert [t.id for t in data.tasks()] == ["t1", "t2", "t3", "t4"]
    assert data.tasks("default") == data.tasks("validation")
    with pytest.raises(ConfigError, match="'test'.*default"):
        data.tasks("test")


def test_split_folders(tmp_path: Path) -> None:
    write_split(tmp_path / "validation", FOUR)
    write_split(tmp_path / "test", [line("x1", answer="?"), line("x2", answer=None)])
    (tmp_path / "notes").mkdir()  # a folder without metadata is not a split
    data = GaiaData.locate(str(tmp_path))
    assert data.splits() == ["test", "validation"]
    assert len(data.tasks("validation")) == 4
    assert [t.answer for t in data.tasks("test")] == [None, None]


def test_hub_layout(tmp_path: Path) -> None:
    write_split(tmp_path / "2023" / "validation", FOUR)
    write_split(tmp_path / "2023" / "test", [line("x1", answer="?")])
    data = GaiaData.locate(tmp_path)
    assert data.splits() == ["test", "validation"]
    assert [t.level for t in data.tasks("validation")] == [1, 2, 1, 3]


def test_task_fields_and_attachment_resolved_beside_metadata(tmp_path: Path) -> None:
    folder = tmp_path / "2023" / "validation"
    folder.mkdir(parents=True)
    (folder / "sheet.csv").write_text("a,b\n1,2\n")
    write_split(folder, [line("t1", level="2", answer="4", file_name="sheet.csv"), line("t2", file_name="")])
    first, second = GaiaData.locate(tmp_path).tasks()
    assert first == GaiaTask(
        id="t1", question="What colour is t1?", level=2, answer="4",
        file_name="sheet.csv", file_path=(folder / "sheet.csv").resolve(),
    )
    assert first.file_path is not None and first.file_path.is_absolute()
    assert (second.file_name, second.file_path, second.gold_calls) == (None, None, ())


def test_env_var_is_used_when_no_folder_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_split(tmp_path, FOUR)
    monkeypatch.setenv("AGENTSPEC_GAIA_DATA", str(tmp_path))
    assert len(GaiaData.locate(None).tasks()) == 4


# --- locating errors --------------------------------------------------------------------------------------


def test_no_folder_and_no_env_var_explains_how_to_get_the_data() -> None:
    with pytest.raises(ConfigError) as info:
        GaiaData.locate(None)
    message = str(info.value)
    assert "gated" in message and "Hugging Face" in message
    assert "--data-dir" in message and "AGENTSPEC_GAIA_DATA" in message


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found.*nowhere.*--data-dir"):
        GaiaData.locate(tmp_path / "nowhere")


def test_env_var_pointing_at_a_missing_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSPEC_GAIA_DATA", str(tmp_path / "gone"))
    with pytest.raises(ConfigError, match="gone"):
        GaiaData.locate(None)


def test_folder_without_metadata(tmp_path: Path) -> None:
    (tmp_path / "validation").mkdir()
    with pytest.raises(ConfigError, match="no metadata.jsonl"):
        GaiaData.locate(tmp_path)


# --- malformed metadata -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", "line 2: not valid JSON"),
        ("[1, 2]", "line 2: expected a JSON object"),
        ({"Question": "q", "Level": 1}, "line 2: missing the required field 'task_id'"),
        ({"task_id": "t9", "Level": 1}, "line 2: missing the required field 'Question'"),
        ({"task_id": "t9", "Question": "q"}, "line 2: missing the required field 'Level'"),
        (line("t9", level=4), "line 2: field 'Level' must be 1, 2 or 3"),
        (line("t9", level="hard"), "line 2: field 'Level'"),
        (line("t9", level=True), "line 2: field 'Level'"),
        (line("t9", answer=7), "line 2: field 'Final answer'"),  # type: ignore[arg-type]
        (line("t1"), "line 2: task_id 't1' appears twice"),
        (line("t9", agentspec_gold_calls={"name": "x"}), "line 2: field 'agentspec_gold_calls'"),
        (line("t9", agentspec_gold_calls=[{"arguments": {}}]), r"line 2: agentspec_gold_calls\[0\]"),
        (line("t9", agentspec_gold_calls=[{"name": "f", "arguments": [1]}]), r"agentspec_gold_calls\[0\]"),
    ],
)
def test_malformed_line_names_file_line_and_field(tmp_path: Path, bad: Any, message: str) -> None:
    path = write_split(tmp_path, [line("t1"), bad])
    data = GaiaData.locate(tmp_path)
    with pytest.raises(ConfigError, match=message) as info:
        data.tasks()
    assert str(path) in str(info.value)


def test_missing_attachment_names_task_and_path(tmp_path: Path) -> None:
    write_split(tmp_path, [line("t1", file_name="photo.png")])
    with pytest.raises(ConfigError, match="'t1'.*photo.png") as info:
        GaiaData.locate(tmp_path).tasks()
    assert str(tmp_path.resolve() / "photo.png") in str(info.value)


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    write_split(tmp_path, [line("t1"), "", "  ", line("t2")])
    assert [t.id for t in GaiaData.locate(tmp_path).tasks()] == ["t1", "t2"]


# --- selection --------------------------------------------------------------------------------------------


@pytest.fixture
def data(tmp_path: Path) -> GaiaData:
    write_split(tmp_path / "validation", FOUR)
    return GaiaData.locate(tmp_path)


def test_level_filter(data: GaiaData) -> None:
    assert [t.id for t in data.tasks(levels=[1])] == ["t1", "t3"]
    assert [t.id for t in data.tasks(levels=[3, 2])] == ["t2", "t4"]


def test_limit_applies_after_the_level_filter(data: GaiaData) -> None:
    assert [t.id for t in data.tasks(limit=2)] == ["t1", "t2"]
    assert [t.id for t in data.tasks(levels=[1, 3], limit=2)] == ["t1", "t3"]
    assert data.tasks(limit=0) == []


def test_task_ids_keep_the_given_order(data: GaiaData) -> None:
    assert [t.id for t in data.tasks(task_ids=["t4", "t1"])] == ["t4", "t1"]


def test_unknown_task_id_names_the_known_ones(data: GaiaData) -> None:
    with pytest.raises(ConfigError, match="'t7'.*t1, t2, t3, t4"):
        data.tasks(task_ids=["t1", "t7"])


def test_unknown_split_names_the_known_ones(data: GaiaData) -> None:
    with pytest.raises(ConfigError, match="'dev'.*validation"):
        data.tasks("dev")


@pytest.mark.parametrize(("levels", "limit"), [([0], None), ([1, 4], None), (None, -1)])
def test_bad_filters(data: GaiaData, levels: list[int] | None, limit: int | None) -> None:
    with pytest.raises(ConfigError):
        data.tasks(levels=levels, limit=limit)


def test_gold_calls_are_parsed_as_tool_calls(tmp_path: Path) -> None:
    calls = [{"name": "web_search", "arguments": {"query": "tallest tree"}}, {"name": "final_answer"}]
    write_split(tmp_path, [line("t1", agentspec_gold_calls=calls), line("t2")])
    first, second = GaiaData.locate(tmp_path).tasks()
    assert first.gold_calls == (
        ToolCall(name="web_search", arguments={"query": "tallest tree"}),
        ToolCall(name="final_answer", arguments={}),
    )
    assert second.gold_calls == ()
    # Loading twice gives the very same calls, ids included.
    assert [c.id for c in GaiaData.locate(tmp_path).tasks()[0].gold_calls] == [c.id for c in first.gold_calls]


# --- answers and scoring ----------------------------------------------------------------------------------


def write_answers(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def test_read_answers_ignores_extra_keys(tmp_path: Path) -> None:
    path = write_answers(tmp_path / "answers.jsonl", [
        {"task_id": "t1", "model_answer": "Blue", "reasoning_trace": "looked it up"},
        {"task_id": "t2", "model_answer": 17},
    ])
    assert read_answers(path) == {"t1": "Blue", "t2": "17"}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("oops", "line 2: not valid JSON"),
        ({"model_answer": "x"}, "line 2: missing the required field 'task_id'"),
        ({"task_id": "t2"}, "line 2: missing the required field 'model_answer'"),
        ({"task_id": "t2", "model_answer": ["x"]}, "line 2: field 'model_answer'"),
        ({"task_id": "t1", "model_answer": "x"}, "line 2: task 't1' is answered twice"),
    ],
)
def test_read_answers_malformed_line(tmp_path: Path, bad: Any, message: str) -> None:
    path = write_answers(tmp_path / "answers.jsonl", [{"task_id": "t1", "model_answer": "x"}, bad])
    with pytest.raises(ConfigError, match=message):
        read_answers(path)


def test_read_answers_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="answers file not found"):
        read_answers(tmp_path / "none.jsonl")


def task(task_id: str, level: int, answer: str | None) -> GaiaTask:
    return GaiaTask(id=task_id, question="?", level=level, answer=answer, file_name=None, file_path=None)


def test_score_counts_missing_answers_as_wrong_and_splits_by_level() -> None:
    tasks = [task("a", 1, "42"), task("b", 1, "Oslo"), task("c", 3, "x, y"), task("d", 3, "7")]
    result = score(tasks, {"a": "$42", "b": "Bergen", "c": "X; Y", "d": None})
    assert result == {"accuracy": 0.5, "accuracy_by_level": {"1": 0.5, "3": 0.5}, "scored": 4, "correct": 2}


def test_score_end_to_end_from_files(tmp_path: Path) -> None:
    write_split(tmp_path, [line("t1", 1, "blue"), line("t2", 2, "3"), line("t3", 2, "red")])
    answers = write_answers(tmp_path / "a.jsonl", [
        {"task_id": "t1", "model_answer": "Blue."}, {"task_id": "t2", "model_answer": "3.0"},
    ])
    result = score(GaiaData.locate(tmp_path).tasks(), read_answers(answers))
    assert result["correct"] == 2 and result["scored"] == 3
    assert result["accuracy_by_level"] == {"1": 1.0, "2": 0.5}


def test_score_refuses_the_test_split() -> None:
    with pytest.raises(ConfigError, match="test split has no answers"):
        score([task("a", 1, "1"), task("b", 1, None)], {"a": "1", "b": "2"})


def test_score_refuses_nothing_to_score() -> None:
    with pytest.raises(ConfigError, match="no GAIA tasks"):
        score([], {})


def test_score_docstring_example_holds() -> None:
    failures, tried = doctest.testmod(envs.gaia.dataset)
    assert tried > 0 and failures == 0
