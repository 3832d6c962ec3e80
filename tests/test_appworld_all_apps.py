"""An AppWorld task whose data names no required apps is offered every app's API tools: the run says so once on
stderr, the episode's evaluation and the mode's figures carry it, and ``--bench-option apps=...`` restricts it.

Runs the real engine on our fixture tasks (``envs/appworld/fixtures.py``), with ``agspecnote_1``'s
``required_apps.json`` taken out (as in AppWorld's test splits, whose ground truth is minimal); skipped only where
the AppWorld venv cannot be made (see ``tests/test_appworld.py``, whose fixtures these are).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import test_appworld

from agentspec.cli import main
from envs.appworld.bench import AppWorldBench

# The shared fixtures: AppWorld's venv (made once) and our fixture data folder.
venv, fixture_root = test_appworld.venv, test_appworld.fixture_root

WIDE = "agspecnote_1"
"""The fixture task whose required apps are taken out."""


@pytest.fixture(scope="module")
def root(fixture_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture data, linked, but for a copy of ``WIDE`` without its ground truth's ``required_apps.json``."""
    root = tmp_path_factory.mktemp("appworld-all-apps")
    data = root / "data"
    (data / "tasks").mkdir(parents=True)
    for entry in (fixture_root / "data").iterdir():
        if entry.name != "tasks":
            (data / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    for task in (fixture_root / "data" / "tasks").iterdir():
        if task.name == WIDE:
            shutil.copytree(task, data / "tasks" / task.name)
            (data / "tasks" / task.name / "ground_truth" / "required_apps.json").unlink()
        else:
            (data / "tasks" / task.name).symlink_to(task, target_is_directory=True)
    return root


def _apps(bench: AppWorldBench, task_id: str) -> set[str]:
    return {spec.name.partition("__")[0] for spec in bench.tools(bench.task(task_id), solo=True) if "__" in spec.name}


def test_only_a_task_without_required_apps_gets_every_app(root: Path, fixture_root: Path, venv: dict) -> None:
    bench = AppWorldBench.from_data_dir(root, python=venv["python"])
    every = set(bench.data.api_docs)
    assert len(every) > 5 and _apps(bench, WIDE) == every and bench.all_apps(bench.task(WIDE))
    # An empty list is known: the address questions need the supervisor app alone (AppWorld leaves it out).
    assert bench.task("agspecaddr_1").required_apps == []
    assert _apps(bench, "agspecaddr_1") == {"supervisor", "api_docs"} and not bench.all_apps(bench.task("agspecaddr_1"))
    # The untouched fixture task keeps its own apps.
    unchanged = AppWorldBench.from_data_dir(fixture_root, python=venv["python"])
    assert _apps(unchanged, WIDE) == {"simple_note", "supervisor", "api_docs"}
    # meta and code actions offer a few tools whatever the apps: nothing falls back there.
    for actions in ("meta", "code"):
        other = AppWorldBench.from_data_dir(root, python=venv["python"], actions=actions)
        assert not other.all_apps(other.task(WIDE))


def test_the_bench_says_so_once(root: Path, venv: dict, capsys: pytest.CaptureFixture[str]) -> None:
    bench = AppWorldBench.from_data_dir(root, python=venv["python"])
    tools = len(bench.tools(bench.task(WIDE), solo=True))
    bench.tasks("dev")
    [warning] = capsys.readouterr().err.splitlines()
    assert warning.startswith("warning: appworld: 1 of 3 tasks (first: agspecnote_1) have no required_apps")
    assert f"({tools} tools in its prompt)" in warning and "--bench-option apps=APP,APP" in warning
    assert "simple_note" in warning and "supervisor" not in warning  # the apps one may name
    bench.tasks("dev")
    bench.tasks("train")
    assert capsys.readouterr().err == ""


def test_a_run_says_so_and_records_it(root: Path, venv: dict, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["run", "--json", "--bench", "appworld", "--data-dir", str(root), "--bench-option", f"python={venv['python']}",
                 "--agent", "oracle", "--task-ids", WIDE, "--no-progress", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    [warning] = [line for line in captured.err.splitlines() if "required_apps" in line]
    assert warning.startswith(f"warning: appworld: 1 of 1 tasks (first: {WIDE})")
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["modes"]["sequential"]["all_apps_tasks"] == 1 and summary["modes"]["sequential"]["tgc"] == 100.0
    [record] = json.loads((out / "results.json").read_text())["episodes"]["sequential"]
    assert record["evaluation"]["all_apps"] is True and record["evaluation"]["success"] is True


def test_the_apps_option_restricts_every_task(root: Path, venv: dict, capsys: pytest.CaptureFixture[str]) -> None:
    bench = AppWorldBench.from_data_dir(root, python=venv["python"], apps="simple_note")
    assert [t.id for t in bench.tasks("dev")] == ["agspecaddr_1", "agspecaddr_2", WIDE]
    assert "warning" not in capsys.readouterr().err
    assert _apps(bench, WIDE) == _apps(bench, "agspecaddr_1") == {"simple_note", "supervisor", "api_docs"}
    assert not bench.all_apps(bench.task(WIDE)) and "all_apps_tasks" not in bench.figures([{"task_id": WIDE}])
    # An app the data does not have is a one-line usage error, from every command that opens the bench.
    code = main(["speculator", "score", "--bench", "appworld", "--split", "dev", "--data-dir", str(root),
                 "--folds", "2", "--bench-option", "apps=simple_note,spotfy"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "no app spotfy" in err and "simple_note" in err, err
