"""Shared fixtures: the real tau2 data and recorded runs beside the checkout, and one bench per session; runs
without ``--out`` keep their results in a temporary folder, never in the checkout."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import SECRET, dev_image, docker_client  # noqa: F401 - the Docker fixtures (tests marked docker)

REPO = Path(__file__).resolve().parents[1]
TAU2_DIR = REPO.parent / "shared" / "data" / "tau2"


@pytest.fixture(scope="session", autouse=True)
def default_runs_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``$AGENTSPEC_RUNS`` for the whole session (and the commands it starts): where ``agentspec run`` without
    ``--out`` writes its results folder, instead of ``./runs`` in the checkout."""
    folder = tmp_path_factory.mktemp("runs")
    before = os.environ.get("AGENTSPEC_RUNS")
    os.environ["AGENTSPEC_RUNS"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("AGENTSPEC_RUNS", None)
    else:
        os.environ["AGENTSPEC_RUNS"] = before


@pytest.fixture(scope="session")
def tau2_dir() -> Path:
    if not (TAU2_DIR / "telecom" / "tasks.json").is_file():
        pytest.fail(f"tau2 data not found at {TAU2_DIR}: the tests need ../shared/data/tau2 beside the checkout")
    return TAU2_DIR


@pytest.fixture(scope="session")
def traces_dir(tau2_dir: Path) -> Path:
    """Recorded tau2-bench runs of real agents (``../shared/data/traces``, beside the tau2 data)."""
    folder = tau2_dir.parent / "traces"
    if not (folder / "README.md").is_file():
        pytest.fail(f"recorded runs not found at {folder}: the tests need ../shared/data/traces beside the checkout")
    return folder


@pytest.fixture(scope="session")
def bench(tau2_dir: Path):
    from agentspec.bench.registry import open_bench

    return open_bench("tau2-telecom", tau2_dir)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's home holding agentspec's cache with a run-log key (``SECRET``) and a file of theirs, as
    ``$HOME`` and the working directory (the jail tests: nothing of it may be read from inside)."""
    home = tmp_path / "home"
    cache = home / ".cache" / "agentspec"
    cache.mkdir(parents=True)
    (cache / "runlog.key").write_text(SECRET)
    (home / "notes.txt").write_text("a file of the user's")
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CACHE_HOME", "AGENTSPEC_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(home)
    return home
