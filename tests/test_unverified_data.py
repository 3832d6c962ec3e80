"""`--data-dir DIR --unverified-data`: tau2 data that is not the pinned release runs, with one warning line and
``data_verified: false`` plus the files' sha256 in the summary; without the flag a hash mismatch stays an error."""

from __future__ import annotations

import json
import shutil

import pytest

from agentspec.cli import main
from agentspec.data import resolve_data_dir, sha256_file, unverified_data
from agentspec.errors import DataError
from envs.tau2_telecom.dataset import TAU2_DATA

AIRPLANE = "[service_issue]airplane_mode_on[PERSONA:None]"
RENAMED = "custom_airplane_mode_on"


@pytest.fixture
def custom(tau2_dir, tmp_path):
    """A copy of the tau2 data with one task's id renamed (in the tasks and the splits)."""
    for rel in TAU2_DATA.files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tau2_dir / rel, tmp_path / rel)
    for rel in ("telecom/tasks.json", "telecom/split_tasks.json"):
        path = tmp_path / rel
        path.write_text(path.read_text(encoding="utf-8").replace(AIRPLANE, RENAMED), encoding="utf-8")
    return tmp_path


def argv(folder, *more):
    return ["run", "--json", "--bench", "tau2-telecom", "--task-ids", RENAMED, "--solo", "--agent", "oracle", "--mode",
            "sequential", "--data-dir", str(folder), "--no-progress", *more]


def test_custom_data_runs_with_the_flag_and_says_so(custom, capsys):
    assert main(argv(custom, "--unverified-data")) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["data_verified"] is False
    assert summary["data_sha256"]["telecom/tasks.json"] == sha256_file(custom / "telecom" / "tasks.json")
    assert summary["data_sha256"]["telecom/db.toml"] == TAU2_DATA.files["telecom/db.toml"]  # unchanged file
    assert summary["modes"]["sequential"]["reward_mean"] == 1.0  # the renamed task ran
    warnings = [line for line in captured.err.splitlines() if "unverified" in line]
    assert len(warnings) == 1 and "tasks.json" in warnings[0] and "split_tasks.json" in warnings[0]


def test_without_the_flag_a_hash_mismatch_stays_an_error(custom, capsys):
    assert main(argv(custom)) == 2
    assert "fails its hash check" in capsys.readouterr().err
    with pytest.raises(DataError, match="--unverified-data"):
        resolve_data_dir(TAU2_DATA, custom)
    with unverified_data(), pytest.raises(DataError, match="missing telecom/db.toml"):
        (custom / "telecom" / "db.toml").unlink()  # missing files are never custom data
        resolve_data_dir(TAU2_DATA, custom)


def test_the_pinned_release_is_reported_verified(tau2_dir, capsys):
    assert main(["run", "--json", "--bench", "tau2-telecom", "--task-ids", AIRPLANE, "--solo", "--agent", "oracle", "--mode",
                 "sequential", "--data-dir", str(tau2_dir), "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["data_verified"] is True and summary["data_sha256"] == dict(TAU2_DATA.files)
