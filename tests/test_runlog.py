"""The run log is exactly-once and safe to read: a crash at any record, a torn line, a tampered or malformed
log, and the Python API's own log (resume, keys).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_executor_safety import SCRIPT, RandomSpeculator, ScriptAuthority, replay, run_trio
from toy_env import KVEnvironment

from agentspec import Executor
from agentspec.errors import ConfigError
from agentspec.macros import Macro, MacroLibrary, MacroStep
from agentspec.runtime.config import ExecutorConfig
from agentspec.runtime.executor import ExecutionLoop
from agentspec.runtime.runlog.records import signed_line
from agentspec.runtime.runlog.writer import RunLog
from agentspec.snapshot import InProcessBackend
from agentspec.types import Observation, ToolCall

# A macro that fires on SCRIPT: after the confirmed anchor put(a), it commits incr(a), get(a), incr(b) at once.
MACROS = MacroLibrary(macros=[Macro(id="put-incr-get-incr", n=10, k=10, lcb=0.8, steps=[
    MacroStep(name="put", arguments={"key": "a", "value": 1}), MacroStep(name="incr", arguments={"key": "a"}),
    MacroStep(name="get", arguments={"key": "a"}), MacroStep(name="incr", arguments={"key": "b"})])])


async def _smc(log: RunLog | None, resumed=None):
    authority = ScriptAuthority(SCRIPT, think=2.0)
    speculator = RandomSpeculator(authority, random.Random(0), 1.0, 0.0, slowness=0.1)
    backend = InProcessBackend(KVEnvironment())
    loop = ExecutionLoop(backend, authority, speculator, config=ExecutorConfig(mode="smc"), macros=MACROS,
                         log=log, task_id="toy")
    if resumed is not None:
        loop.resume(resumed)
    return backend, await loop.run()


@pytest.fixture(scope="module")
def whole_log(tmp_path_factory) -> list[str]:
    path = tmp_path_factory.mktemp("whole") / "run.jsonl"
    log = RunLog(path)
    _, result = run_trio(_smc, log)
    log.close()
    assert [s.source for s in result.steps].count("macro") == 3  # one batch of three steps
    return path.read_text().splitlines(keepends=True)


def test_a_macro_batch_is_one_record(whole_log):
    commits = [json.loads(line) for line in whole_log if '"type":"commit"' in line]
    batch = [c for c in commits if len(c["steps"]) > 1]
    assert len(batch) == 1 and [s["step"] for s in batch[0]["steps"]] == [1, 2, 3]
    assert "checkpoint" in batch[0]


@settings(max_examples=30, deadline=None)
@given(cut=st.integers(0, 40), torn=st.integers(0, 30))
def test_a_crash_at_any_byte_resumes_to_the_same_state(whole_log, tmp_path_factory, cut, torn):
    """Kill -9 between any two records (or in the middle of one): the resumed run applies each effect once."""
    cut = min(cut, len(whole_log))
    text = "".join(whole_log[:cut])
    if cut < len(whole_log):
        text += whole_log[cut][: min(torn, len(whole_log[cut]) - 1)]  # a record cut short, never its newline
    path = tmp_path_factory.mktemp("cut") / "run.jsonl"
    path.write_text(text)
    logged = RunLog.read(path).get("toy")
    log = RunLog(path)
    backend, resumed = run_trio(_smc, log, logged)
    log.close()
    assert backend.live.state == replay(resumed.steps)
    assert backend.live.state["journal"] == ["put a 1", "incr a", "incr b", "reset b", "notify hi"]
    RunLog.read(path)  # and the log it leaves reads back whole


def test_the_issue_reproduction_resumes_a_telecom_macro_task(tau2_dir, tmp_path):
    """`--resume` after a kill just past the first step of a three-step macro commit: reward stays 1.0."""
    from agentspec.cli import main

    task = "[service_issue]airplane_mode_on|overdue_bill_suspension[PERSONA:None]"
    common = ["run", "--bench", "tau2-telecom", "--solo", "--agent", "oracle", "--data-dir", str(tau2_dir), "--mode", "smc",
              "--macros", "macros/tau2-telecom.json", "--speculator-model", "noisy-oracle:0.8",
              "--latency-model", "smc-paper", "--no-progress", "--task-ids", task]
    full = tmp_path / "full"
    assert main([*common, "--out", str(full)]) == 0
    lines = (full / "run-smc.log.jsonl").read_text().splitlines(keepends=True)
    batches = [i for i, line in enumerate(lines) if '"type":"commit"' in line and len(json.loads(line)["steps"]) > 1]
    assert batches, "a macro fired on this task"
    for cut in (batches[0], batches[0] + 1):  # just before the batch's record, and just after it
        folder = tmp_path / f"cut{cut}"
        folder.mkdir()
        (folder / "run-smc.log.jsonl").write_text("".join(lines[:cut]))
        assert main([*common, "--out", str(folder), "--resume"]) == 0
        results = json.loads((folder / "results.json").read_text())
        assert [e["reward"] for e in _episodes(results)] == [1.0]


def _episodes(results: dict) -> list[dict]:
    return [e for episodes in results["episodes"].values() for e in episodes]


# ---------------------------------------------------------------- untrusted logs


class _Boom:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _log_with_checkpoint(path: Path, checkpoint: dict) -> None:
    call = ToolCall(name="put", arguments={"key": "a", "value": 1})
    log = RunLog(path)
    (eid,) = log.intents("toy", 0, [call], "authority")
    log.commit("toy", [(0, eid, Observation(call_id=call.id, name="put", content="ok"))], checkpoint)
    log.close()


def _resume_toy(path: Path) -> None:
    logged = RunLog.read(path)["toy"]
    loop = ExecutionLoop(InProcessBackend(KVEnvironment()), ScriptAuthority(SCRIPT, think=0.0), task_id="toy",
                         config=ExecutorConfig(mode="sequential"))
    loop.resume(logged)


@pytest.mark.parametrize("mac", ["forged", "missing-key"])
def test_a_pickle_in_the_log_is_never_loaded(tmp_path, monkeypatch, mac):
    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path / "cache"))
    marker = tmp_path / "pwned"
    data = pickle.dumps(_Boom(str(marker)))
    if mac == "forged":
        tag = "0" * 64
    else:  # signed with somebody else's key: a valid tag, but not under this user's key
        import hashlib
        import hmac

        tag = hmac.new(b"someone else's key", data, hashlib.sha256).hexdigest()
    _log_with_checkpoint(tmp_path / "run.jsonl", {"format": "signed-pickle", "data": base64.b64encode(data).decode(), "mac": tag})
    with pytest.raises(ConfigError, match="signature does not match"):
        _resume_toy(tmp_path / "run.jsonl")
    assert not marker.exists()


def test_a_log_of_the_old_format_with_a_raw_pickle_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    old = {"type": "commit", "task_id": "toy", "step": 0, "effect_id": "x", "observation": {},
           "checkpoint": base64.b64encode(pickle.dumps(_Boom(str(marker)))).decode()}
    (tmp_path / "run.jsonl").write_text(json.dumps(old) + "\n")
    with pytest.raises(ConfigError, match="line 1: not a run-log record"):
        RunLog.read(tmp_path / "run.jsonl")
    assert not marker.exists()


def test_a_signed_checkpoint_round_trips(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path / "cache"))
    backend = InProcessBackend(KVEnvironment({"a": 2}, ["put a 2"]))
    _log_with_checkpoint(tmp_path / "run.jsonl", backend.checkpoint())
    assert oct((tmp_path / "cache" / "runlog.key").stat().st_mode & 0o777) == "0o600"
    fresh = InProcessBackend(KVEnvironment())
    fresh.restore_checkpoint(RunLog.read(tmp_path / "run.jsonl")["toy"].checkpoint)
    assert fresh.live.state == {"data": {"a": 2}, "journal": ["put a 2"]}


def test_a_tampered_telecom_checkpoint_stops_the_run_with_exit_2(tau2_dir, tmp_path, capsys):
    from agentspec.cli import main

    common = ["run", "--bench", "tau2-telecom", "--agent", "oracle", "--data-dir", str(tau2_dir), "--mode", "sequential",
              "--no-progress", "--limit", "1", "--out", str(tmp_path)]
    assert main(common) == 0
    path = tmp_path / "run-sequential.log.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    commits = [i for i, line in enumerate(lines) if '"type":"commit"' in line]
    record = json.loads(lines[commits[0]])
    assert record["checkpoint"]["format"] == "json"
    record["checkpoint"]["state"]["carrier"]["customers"] = "not a list"
    path.write_text("".join(lines[: commits[0]]) + json.dumps(record) + "\n")  # edited: its signature no longer holds
    capsys.readouterr()
    assert main([*common, "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"line {commits[0] + 1}: the record's signature does not match" in err[0]
    # Signed with this user's key after all (a writer's bug, not an attacker): the state is still validated as data.
    previous = json.loads(lines[commits[0] - 1])["mac"]  # chained to the record before it, as the writer would
    path.write_text("".join(lines[: commits[0]]) + signed_line({k: v for k, v in record.items() if k != "mac"}, previous))
    assert main([*common, "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoint's state is not valid" in err[0]


@pytest.mark.parametrize(("line", "why"), [
    ("{}", "not a run-log record"),
    ("[1, 2]", "not a run-log record"),
    ('{"type": "commit", "task_id": "toy", "steps": [{"step": 0, "effect_id": "e", '
     '"observation": {"call_id": "c", "name": "get", "content": "a=0"}}]}', "commits step 0 without its intent"),
    ('{"type": "intent", "task_id": "toy", "step": 0, "effect_id": "e", "call": {"name": "get", "arguments": {}}, '
     '"source": "authority"}', "the effect id does not match its call"),
    ('{"type": "log", "version": 4, "run_id": "r"}', "a header in the middle of the log"),
])
def test_a_malformed_record_is_refused_with_its_line(tmp_path, line, why):
    """Records signed with this user's key (a writer's bug, not an attacker) are still checked as a log."""
    path = tmp_path / "run.jsonl"
    RunLog(path).close()
    record = json.loads(line)
    previous = json.loads(path.read_text())["mac"]  # the header's: the record is chained to it
    with path.open("a") as handle:
        handle.write(signed_line(record, previous) if isinstance(record, dict) else line + "\n")
    with pytest.raises(ConfigError, match=f"line 2: (task .toy. )?{why}"):
        RunLog.read(path)


def test_a_torn_last_line_is_cut_before_appending(tmp_path):
    path = tmp_path / "run.jsonl"
    call = ToolCall(name="get", arguments={"key": "a"})
    seen = Observation(call_id=call.id, name="get", content="a=0")
    log = RunLog(path)
    log.commit("toy", [(0, log.intents("toy", 0, [call], "authority")[0], seen)], None)
    log.close()
    with path.open("a") as handle:
        handle.write(torn := '{"type":"intent","task_id":"toy","st')  # killed mid-write
    assert len(RunLog.read(path)["toy"].steps) == 1
    for step in (1, 2):  # two resumes in a row, each appending
        log = RunLog(path)
        assert log.dropped_tail == (len(torn) if step == 1 else 0)
        log.commit("toy", [(step, log.intents("toy", step, [call], "authority")[0], seen)], None)
        log.close()
        assert len(RunLog.read(path)["toy"].steps) == step + 1


def test_a_checkpointless_state_is_not_resumed_silently(tmp_path):
    """An environment whose state cannot be serialised: resuming its committed steps would lose their effects."""

    class Unpicklable(KVEnvironment):
        def snapshot(self):
            from agentspec.env import StateSnapshot

            return StateSnapshot.of((self.tools.data, self.tools.journal, lambda: None))  # a lambda: no pickle

    backend = InProcessBackend(Unpicklable())
    assert backend.checkpoint() is None
    path = tmp_path / "run.jsonl"
    _log_with_checkpoint(path, None)  # type: ignore[arg-type]
    loop = ExecutionLoop(backend, ScriptAuthority(SCRIPT, think=0.0), task_id="toy", config=ExecutorConfig(mode="sequential"))
    with pytest.raises(ConfigError, match="no checkpoint of the state they left"):
        loop.resume(RunLog.read(path)["toy"])


# ---------------------------------------------------------------- the Python API's log


class _Died(Exception):
    pass


class _Scripted:
    """An authority policy for the API: the script, then done; can be told to die after N decisions."""

    def __init__(self, die_after: int | None = None) -> None:
        self.decisions, self.die_after = 0, die_after

    async def decide(self, history):
        from agentspec.runtime.policies.protocol import Decision

        if self.die_after is not None and self.decisions >= self.die_after:
            raise _Died  # the process dies here
        self.decisions += 1
        if len(history) < len(SCRIPT):
            return Decision(call=SCRIPT[len(history)])
        return Decision(call=None, final={"answer": "finished"})


def test_the_api_resumes_from_its_log_exactly_once(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path / "cache"))
    env = KVEnvironment()
    out = tmp_path / "api"
    log = out / "run-sequential.log.jsonl"
    with pytest.raises(BaseExceptionGroup) as died:
        Executor(env, authority=_Scripted(die_after=3), mode="sequential", out=out).run_sync("count things")
    assert died.group_contains(_Died)
    assert env.tools.journal == ["put a 1", "incr a"]
    resumed = Executor(KVEnvironment(), authority=_Scripted(), mode="sequential", out=out)
    result = resumed.run_sync("count things")
    assert [s.call for s in result.steps] == SCRIPT and result.answer == "finished"
    assert resumed.backend.live.state["journal"] == ["put a 1", "incr a", "incr b", "reset b", "notify hi"]
    executor = Executor(KVEnvironment(), authority=_Scripted(), mode="sequential", out=out)
    again = executor.run_sync("count things")  # finished in the log: nothing runs again
    assert again.answer == "finished" and [s.call for s in again.steps] == SCRIPT
    assert executor.backend.live.state["journal"] == []  # this executor applied no effect at all
    first = RunLog.read(log)
    assert len(first) == 1 and len(next(iter(first.values())).steps) == len(SCRIPT)


def test_api_log_keys_do_not_collide(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path / "cache"))
    prefix = "x" * 80
    out = tmp_path / "api"
    log = out / "run-sequential.log.jsonl"
    for suffix in ("one", "two"):
        Executor(KVEnvironment(), authority=_Scripted(), mode="sequential", out=out).run_sync(prefix + suffix)
    assert len(RunLog.read(log)) == 2
