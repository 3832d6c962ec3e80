"""A GAIA metadata line cannot point the attachment reader outside its data folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentspec.errors import DataError
from envs.gaia.dataset import GaiaData


def write_split(folder: Path, file_name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"task_id": "t1", "Question": "What does the file say?", "Level": 1, "Final answer": "x",
              "file_name": file_name}  # fmt: skip
    (folder / "metadata.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "secret.txt"
    path.parent.mkdir()
    path.write_text("the key to everything", encoding="utf-8")
    return path


def test_an_absolute_path_is_refused(tmp_path: Path, secret: Path) -> None:
    write_split(tmp_path / "data", str(secret))
    with pytest.raises(DataError, match="leads outside the data folder"):
        GaiaData.locate(tmp_path / "data").tasks()


def test_dot_dot_is_refused(tmp_path: Path, secret: Path) -> None:
    write_split(tmp_path / "data" / "validation", "../../outside/secret.txt")
    with pytest.raises(DataError, match="'../../outside/secret.txt' of task 't1' leads outside"):
        GaiaData.locate(tmp_path / "data").tasks("validation")


def test_a_symlink_out_of_the_folder_is_refused(tmp_path: Path, secret: Path) -> None:
    data = tmp_path / "data"
    write_split(data, "notes.txt")
    (data / "notes.txt").symlink_to(secret)
    with pytest.raises(DataError, match="leads outside the data folder"):
        GaiaData.locate(data).tasks()
    # Through a linked folder as well.
    write_split(data, "linked/secret.txt")
    (data / "linked").symlink_to(secret.parent)
    with pytest.raises(DataError, match="leads outside the data folder"):
        GaiaData.locate(data).tasks()


def test_a_symlink_loop_and_a_nul_byte_are_data_errors(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_split(data, "loop.txt")
    (data / "loop.txt").symlink_to(data / "loop.txt")
    with pytest.raises(DataError, match="loop.txt"):
        GaiaData.locate(data).tasks()
    write_split(data, "a\u0000b.txt")
    with pytest.raises(DataError, match="cannot be resolved"):
        GaiaData.locate(data).tasks()


def test_attachments_inside_the_folder_still_resolve(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_split(data, "files/sheet.csv")
    (data / "files").mkdir()
    (data / "files" / "sheet.csv").write_text("a,b\n", encoding="utf-8")
    (data / "alias.csv").symlink_to(data / "files" / "sheet.csv")  # a link that stays inside is fine
    (task,) = GaiaData.locate(data).tasks()
    assert task.file_path == (data / "files" / "sheet.csv").resolve()
    write_split(data, "alias.csv")
    (task,) = GaiaData.locate(data).tasks()
    assert task.file_path == (data / "files" / "sheet.csv").resolve()
