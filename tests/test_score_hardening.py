"""`agentspec score` on hostile or useless answers files: one line, exit 2; non-finite numbers are no answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentspec.cli import main
from envs.gaia.dataset import GaiaTask, read_answers, score
from envs.gaia.scorer import question_scorer

FIXTURES = Path(__file__).resolve().parent / "data" / "gaia-format"


def score_cli(capsys, answers: Path) -> tuple[int, str, str]:
    code = main(["score", "--bench", "gaia", "--answers", str(answers), "--data-dir", str(FIXTURES)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2 and out == "", (code, out)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_deeply_nested_line_is_a_one_line_error(capsys, tmp_path: Path) -> None:
    answers = tmp_path / "deep.jsonl"
    depth = 100_000
    answers.write_text('{"task_id": "ours-0001", "model_answer": ' + "[" * depth + "]" * depth + "}\n")
    assert_one_line_error(*score_cli(capsys, answers), str(answers), "line 1", "nested too deeply")


@pytest.mark.parametrize("content", ["", "\n\n   \n"])
def test_an_empty_answers_file_is_an_error_not_accuracy_zero(capsys, tmp_path: Path, content: str) -> None:
    answers = tmp_path / "empty.jsonl"
    answers.write_text(content)
    assert_one_line_error(*score_cli(capsys, answers), str(answers), "empty")


def test_answers_for_no_task_of_the_split_are_an_error_naming_the_file(capsys, tmp_path: Path) -> None:
    answers = tmp_path / "other-split.jsonl"
    answers.write_text("".join(json.dumps({"task_id": f"x-{i}", "model_answer": "42"}) + "\n" for i in range(3)))
    assert_one_line_error(*score_cli(capsys, answers), str(answers), "none of its 3 task ids", "'validation'")


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused_as_not_json(capsys, tmp_path: Path, token: str) -> None:
    answers = tmp_path / "nan.jsonl"
    answers.write_text('{"task_id": "ours-0001", "model_answer": "42"}\n'
                       f'{{"task_id": "ours-0002", "model_answer": {token}}}\n')
    assert_one_line_error(*score_cli(capsys, answers), str(answers), "line 2", f"{token} is not a JSON number")


def test_a_number_too_big_for_a_float_keeps_its_text_and_is_scored_wrong(capsys, tmp_path: Path) -> None:
    answers = tmp_path / "huge.jsonl"
    answers.write_text('{"task_id": "ours-0001", "model_answer": 1e999}\n'
                       '{"task_id": "ours-0002", "model_answer": -1e999}\n'
                       '{"task_id": "ours-0003", "model_answer": 4.50}\n')
    assert read_answers(answers) == {"ours-0001": "1e999", "ours-0002": "-1e999", "ours-0003": "4.50"}
    code, out, err = score_cli(capsys, answers)
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["correct"] == 0 and summary["scored"] == 12


def test_a_number_written_plainly_is_still_an_answer(tmp_path: Path) -> None:
    answers = tmp_path / "a.jsonl"
    answers.write_text('{"task_id": "a", "model_answer": 42}\n{"task_id": "b", "model_answer": 3.0}\n')
    tasks = [GaiaTask(id=i, question="?", level=1, answer=gt, file_name=None, file_path=None)
             for i, gt in (("a", "42"), ("b", "3"))]  # fmt: skip
    assert score(tasks, read_answers(answers))["correct"] == 2


def test_a_numeric_task_id_is_refused(tmp_path: Path) -> None:
    answers = tmp_path / "a.jsonl"
    answers.write_text('{"task_id": 7, "model_answer": "x"}\n')
    with pytest.raises(ValueError, match="'task_id' must be a non-empty string"):
        read_answers(answers)


@pytest.mark.parametrize("answer", ["inf", "-inf", "nan", "NaN", "1e999", "Infinity", "$1e999"])
@pytest.mark.parametrize("truth", ["42", "0", "1e308", "3, 4"])
def test_non_finite_answers_match_no_number(answer: str, truth: str) -> None:
    assert not question_scorer(answer, truth)
    assert not question_scorer(f"{answer}, 4", "3, 4")


def test_a_ground_truth_that_only_looks_non_finite_is_a_word() -> None:
    # float("Nan") is nan, which equals nothing: read as a number, this answer could never be right.
    assert question_scorer("nan", "Nan") and question_scorer("INFINITY", "Infinity")
    assert not question_scorer("inf", "Infinity")
