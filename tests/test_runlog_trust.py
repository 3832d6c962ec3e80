"""Run logs that cannot be lost or forged (issue 26, items 5-7): one run per --out folder, no silent deletion of an
earlier log, a resume only under the log's own settings, every record signed, and a key that is whole and private.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agentspec import checkpoint
from agentspec.batch import log_config, prior_log
from agentspec.cli import main
from agentspec.errors import ConfigError
from agentspec.run_spec import RunSpec
from agentspec.runtime.runlog.lock import locked_out
from agentspec.runtime.runlog.records import data_digest
from agentspec.runtime.runlog.writer import RunLog

REPO = Path(__file__).resolve().parents[1]


def _run(tau2_dir: Path, out: Path, *extra: str) -> list[str]:
    """``agentspec run`` of two telecom tasks with the oracle and a noisy-oracle speculator on the virtual clock."""
    return ["run", "--bench", "tau2-telecom", "--solo", "--agent", "oracle", "--data-dir", str(tau2_dir), "--mode",
            "sa", "--latency-model", "smc-paper", "--no-progress", "--limit", "2", "--out", str(out), *extra]


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.fixture
def logged(tau2_dir, tmp_path, capsys) -> Path:
    """A finished run's --out folder (noisy-oracle:0.8, seed 0)."""
    out = tmp_path / "out"
    assert main(_run(tau2_dir, out, "--speculator-model", "noisy-oracle:0.8")) == 0
    capsys.readouterr()
    return out


# ------------------------------------------------------------------ item 5: no silent loss, one run per folder


def test_a_run_over_an_earlier_log_is_refused_unless_resumed_or_overwritten(tau2_dir, logged, capsys):
    log = logged / "run-sa.log.jsonl"
    before = log.read_bytes()
    assert main(_run(tau2_dir, logged, "--speculator-model", "noisy-oracle:0.8")) == 2
    err = _error(capsys)
    assert str(log) in err and "--resume" in err and "--overwrite" in err
    assert log.read_bytes() == before  # nothing deleted, nothing appended
    assert main(_run(tau2_dir, logged, "--speculator-model", "noisy-oracle:0.8", "--resume", "--overwrite")) == 2
    assert "pass one of them" in _error(capsys)
    assert main(_run(tau2_dir, logged, "--speculator-model", "noisy-oracle:0.5", "--overwrite")) == 0
    header = json.loads(log.read_text().splitlines()[0])
    assert header["config"]["speculator_model"] == "noisy-oracle:0.5"  # a fresh log, of the new run


_HOLD = """
import sys, time
from agentspec.runtime.runlog.lock import locked_out
with locked_out(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_run_into_a_folder_in_use_exits_2_naming_the_holder(tau2_dir, tmp_path, capsys):
    out = tmp_path / "out"
    with subprocess.Popen([sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            assert main(_run(tau2_dir, out, "--speculator-model", "noisy-oracle:0.8")) == 2
            err = _error(capsys)
            assert f"--out {out} is in use by another run (pid {holder.pid} on " in err
            plain = ["run", "--bench", "tau2-telecom", "--agent", "oracle", "--data-dir", str(tau2_dir), "--limit", "1",
                     "--no-progress", "--out", str(out)]  # without --mode: sequential, refused alike
            assert main(plain) == 2 and f"--out {out} is in use by another run" in _error(capsys)
            assert not (out / "run-sa.log.jsonl").exists() and not (out / "results.json").exists()
        finally:
            holder.kill()  # killed, not released: the kernel drops the lock with the process
    assert main(_run(tau2_dir, out, "--speculator-model", "noisy-oracle:0.8")) == 0


def test_the_folder_lock_is_per_run_not_per_process(tmp_path):
    """The command line takes the folder and then runs (which takes it again); another thread may not."""
    seen: list[BaseException] = []
    with locked_out(tmp_path), locked_out(tmp_path):
        worker = threading.Thread(target=lambda: _try_lock(tmp_path, seen))
        worker.start()
        worker.join()
    assert len(seen) == 1 and isinstance(seen[0], ConfigError) and "in use by another run" in str(seen[0])
    with locked_out(tmp_path):  # and it is free again once the run ends
        pass


def _try_lock(folder: Path, seen: list[BaseException]) -> None:
    try:
        with locked_out(folder):
            pass
    except ConfigError as exc:
        seen.append(exc)


# ------------------------------------------------------------------ item 6: same settings, signed records


@pytest.mark.parametrize(("change", "named"), [
    (["--speculator-model", "noisy-oracle:0.0"], 'speculator_model (log: "noisy-oracle:0.8", now: "noisy-oracle:0.0")'),
    (["--speculator-model", "noisy-oracle:0.8", "--seed", "3"], "seed (log: 0, now: 3)"),
    (["--speculator-model", "noisy-oracle:0.8", "--latency-model", "smc-paper", "--depth", "2"], "depth (log: 4, now: 2)"),
])
def test_a_resume_under_other_settings_is_refused_naming_them(tau2_dir, logged, capsys, change, named):
    assert main([*_run(tau2_dir, logged, *change), "--resume"]) == 2
    err = _error(capsys)
    assert "was written with other settings" in err and named in err


def test_a_resume_under_the_same_settings_reuses_the_logged_results(tau2_dir, logged, capsys):
    first = json.loads((logged / "results.json").read_text())
    assert main([*_run(tau2_dir, logged, "--speculator-model", "noisy-oracle:0.8", "--limit", "3"), "--resume"]) == 0
    again = json.loads((logged / "results.json").read_text())
    assert [e["reward"] for e in again["episodes"]["sa"][:2]] == [e["reward"] for e in first["episodes"]["sa"]]
    assert len(again["episodes"]["sa"]) == 3  # a resume may run more tasks: each task's result is its own


def _edit(log: Path, kind: str, change) -> int:
    """Apply ``change`` to the first record of ``kind`` (keeping its mac); its line number."""
    lines = log.read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == kind)
    record = json.loads(lines[index])
    change(record)
    lines[index] = json.dumps(record, separators=(",", ":")) + "\n"
    log.write_text("".join(lines))
    return index + 1


@pytest.mark.parametrize(("kind", "change", "why"), [
    ("task", lambda r: r["result"].update(reward=0.0), "the record's signature does not match"),
    ("task", lambda r: r["result"]["messages"].append({"role": "assistant", "content": "forged"}),
     "the record's signature does not match"),
    ("commit", lambda r: r["steps"][0]["observation"].update(content="forged"), "the record's signature does not match"),
    ("log", lambda r: r["config"].update(speculator_model="noisy-oracle:0.0"), "the record's signature does not match"),
    ("task", lambda r: r.pop("mac"), "an unsigned record"),
])
def test_an_edited_record_is_refused_with_its_line(tau2_dir, logged, capsys, kind, change, why):
    number = _edit(logged / "run-sa.log.jsonl", kind, change)
    speculator = "noisy-oracle:0.0" if kind == "log" else "noisy-oracle:0.8"  # a forged header would match this run
    assert main([*_run(tau2_dir, logged, "--speculator-model", speculator), "--resume"]) == 2
    assert f"run-sa.log.jsonl line {number}: {why}" in _error(capsys)


def _paste_from_another_run(tau2_dir: Path, out: Path, lines: list[str]) -> int:
    """Replace the first task record with the same task's record from a run under other settings; its index."""
    other = out.parent / "other"
    assert main(_run(tau2_dir, other, "--speculator-model", "noisy-oracle:0.0")) == 0
    theirs = {json.loads(line)["task_id"]: line for line in (other / "run-sa.log.jsonl").read_text()
              .splitlines(keepends=True) if json.loads(line)["type"] == "task"}
    index = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "task")
    lines[index] = theirs[json.loads(lines[index])["task_id"]]  # signed with this user's key, in another log
    return index


def _task_lines(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if json.loads(line)["type"] == "task"]


def _delete_a_task(tau2_dir: Path, out: Path, lines: list[str]) -> int:
    index = _task_lines(lines)[0]  # not the last line: that loss reads as a run killed before writing it
    del lines[index]
    return index


def _swap_the_tasks(tau2_dir: Path, out: Path, lines: list[str]) -> int:
    first, second = _task_lines(lines)
    lines[first], lines[second] = lines[second], lines[first]
    return first


@pytest.mark.parametrize("change", [_paste_from_another_run, _delete_a_task, _swap_the_tasks])
def test_a_record_moved_between_or_within_logs_is_refused_with_its_line(tau2_dir, logged, capsys, change):
    """Each record is chained to the one before it, back to the header's run id: whole signed records pasted from
    another log, removed, or reordered are refused, not resumed as this run's results."""
    log = logged / "run-sa.log.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    index = change(tau2_dir, logged, lines)
    capsys.readouterr()
    log.write_text("".join(lines))
    assert main([*_run(tau2_dir, logged, "--speculator-model", "noisy-oracle:0.8"), "--resume"]) == 2
    assert f"run-sa.log.jsonl line {index + 1}: the record's signature does not match" in _error(capsys)


def test_a_resume_appends_to_the_chain_after_a_torn_last_line(tmp_path):
    """A kill mid-write leaves a torn last line: it is dropped, and the records after it chain to the last whole one."""
    path = tmp_path / "run.jsonl"
    log = RunLog(path)
    log.finish("t1#0", {"reward": 1.0})
    log.close()
    with path.open("a") as handle:
        handle.write('{"type":"task","task_id":"t2#0","res')
    assert set(RunLog.read(path)) == {"t1#0"}
    log = RunLog(path)
    log.finish("t2#0", {"reward": 0.0})
    log.close()
    assert {key: task.result for key, task in RunLog.read(path).items()} == {"t1#0": {"reward": 1.0},
                                                                            "t2#0": {"reward": 0.0}}
    RunLog(tmp_path / "other.jsonl").close()
    first, other = (json.loads(p.read_text().splitlines()[0])["run_id"] for p in (path, tmp_path / "other.jsonl"))
    assert first != other  # every log starts its own chain


def test_a_log_signed_under_another_key_is_refused(tau2_dir, logged, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path / "someone-else"))
    assert main([*_run(tau2_dir, logged, "--speculator-model", "noisy-oracle:0.8"), "--resume"]) == 2
    assert "line 1: the record's signature does not match" in _error(capsys)


@dataclasses.dataclass(frozen=True)
class _Task:
    id: str
    question: str


def test_a_task_whose_data_changed_is_not_taken_from_the_log(tmp_path):
    spec = RunSpec.of(agent="oracle", out=str(tmp_path), resume=True)
    mode = spec.modes[0]
    log = RunLog(tmp_path / f"run-{mode.name}.log.jsonl", log_config(spec, mode))
    log.finish("t1#0", {"reward": 1.0}, data_digest(_Task("t1", "what is 2+2?")))
    log.close()
    assert prior_log(spec, mode, [(_Task("t1", "what is 2+2?"), 0)])["t1#0"].result == {"reward": 1.0}
    with pytest.raises(ConfigError, match="the data of task 't1' changed since its result was logged"):
        prior_log(spec, mode, [(_Task("t1", "what is 3+3?"), 0)])


def test_task_digests_are_the_same_in_every_process():
    """A task's gold calls get fresh call ids on every load: the digest must not see them, or no resume would pass."""
    from agentspec.bench.registry import open_bench

    code = ("import json; from agentspec.bench.registry import open_bench; from agentspec.runtime.runlog.records import "
            "data_digest; b = open_bench('workspace-demo', None); print(json.dumps([data_digest(t) for t in b.tasks(b.default_split)]))")
    there = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                      cwd=REPO).stdout)
    bench = open_bench("workspace-demo", None)
    tasks = bench.tasks(bench.default_split)
    assert any(getattr(t, "gold", None) for t in tasks)  # the tasks hold calls (with their random ids)
    assert there == [data_digest(t) for t in tasks]


# ------------------------------------------------------------------ item 7: the key


@pytest.fixture
def key_file(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path / "cache"))
    path = checkpoint.key_path()
    path.parent.mkdir(parents=True)
    return path


def _write_key(path: Path, data: bytes, mode: int = 0o600) -> None:
    path.write_bytes(data)
    path.chmod(mode)


@pytest.mark.parametrize(("data", "mode", "why"), [
    (b"", 0o600, "holds 0 bytes, a key is 32"),  # a crash between creating and writing it, before this fix
    (b"k" * 16, 0o600, "holds 16 bytes, a key is 32"),
    (b"k" * 32, 0o644, "has mode 0644: others may read or change it"),
    (b"k" * 32, 0o620, "has mode 0620"),
])
def test_a_key_that_is_not_whole_and_private_is_refused(key_file, tmp_path, data, mode, why):
    _write_key(key_file, data, mode)
    with pytest.raises(ConfigError, match=f"the run-log key {key_file} {why}"):
        RunLog(tmp_path / "run.jsonl")  # its header is signed: nothing is written under a key anyone could know
    assert not (tmp_path / "run.jsonl").exists() or (tmp_path / "run.jsonl").read_text() == ""


def test_a_key_of_another_owner_or_behind_a_link_is_refused(key_file, tmp_path, monkeypatch):
    elsewhere = tmp_path / "their.key"
    _write_key(elsewhere, b"k" * 32)
    key_file.symlink_to(elsewhere)
    with pytest.raises(ConfigError, match=f"the run-log key {key_file} cannot be read"):
        checkpoint.sign(b"data")
    key_file.unlink()
    _write_key(key_file, b"k" * 32)
    owner = key_file.stat().st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    with pytest.raises(ConfigError, match=f"the run-log key {key_file} belongs to user {owner}, not to you"):
        checkpoint.sign(b"data")


def test_concurrent_key_makers_agree_on_one_whole_key(tmp_path):
    """Every maker and reader gets the same 32 bytes; none sees a key half written."""
    for round_ in range(10):
        path = tmp_path / f"k{round_}" / "runlog.key"
        barrier = threading.Barrier(16)
        keys: list[bytes | BaseException] = []

        # This round's objects bound as defaults (ruff B023): the threads join within the round, so late binding
        # is harmless here, but binding makes that plain.
        def make(
            barrier: threading.Barrier = barrier, keys: list[bytes | BaseException] = keys, path: Path = path
        ) -> None:
            barrier.wait()
            try:
                keys.append(checkpoint._read_or_make_key(path))
            except BaseException as exc:  # noqa: BLE001 - reported below
                keys.append(exc)

        threads = [threading.Thread(target=make) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(set(keys)) == 1 and keys[0] == path.read_bytes() and len(path.read_bytes()) == 32, keys
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        assert [p.name for p in path.parent.iterdir()] == ["runlog.key"]  # no temporary file left behind
