"""Episodes on a real Ray cluster: two nodes started on this machine, compared with local runs of the same tasks.

The cluster is ``ray start --head`` plus a second node joined with ``ray start --address``, each with one CPU,
on this machine's loopback (:data:`~agentspec.cluster.ray_episodes.LOOPBACK_NODE_IP`: no other address of the
machine is ever tried), stopped (by process group) after the module.  A cluster that cannot start skips the
tests that need it; with ``AGENTSPEC_REQUIRE_RAY=1`` (``.ci/run`` sets it) they fail instead.  Episodes use the oracle agent with a noisy-oracle speculator on
the virtual clock over a few tau2-telecom tasks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentspec.cluster.ray_episodes import LOOPBACK_NODE_IP
from agentspec.errors import ConfigError
from agentspec.pipeline import run
from agentspec.run_spec import RunSpec

VENV_BIN = Path(sys.executable).parent
TASKS = 4
BASE: dict[str, Any] = {"bench": "tau2-telecom", "split": "small", "limit": TASKS, "agent": "oracle", "modes": "sa",
                        "speculator_model": "noisy-oracle:0.8", "latency_model": "smc-paper", "progress": False}


REQUIRE_RAY = "AGENTSPEC_REQUIRE_RAY"


def _unavailable(reason: str) -> None:
    """Skip with ``reason``; fail with it instead when ``AGENTSPEC_REQUIRE_RAY=1``."""
    if os.environ.get(REQUIRE_RAY) == "1":
        pytest.fail(f"{reason} [{REQUIRE_RAY}=1: this test must run here]", pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_node(temp: Path, *args: str) -> subprocess.Popen[bytes]:
    # --block keeps `ray start` in the foreground, so its whole process group is ours to stop.
    command = [str(VENV_BIN / "ray"), "start", "--block", "--num-cpus", "1", "--object-store-memory", "100000000",
               "--disable-usage-stats", "--dashboard-agent-listen-port", str(_free_port()), *args]
    # Token auth off for the test cluster: a token a user once generated (~/.ray/auth_token) would otherwise turn it
    # on for the nodes but not for this process, the driver, which could then never connect.
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    with (temp / f"node-{len(list(temp.glob('node-*')))}.log").open("wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def _stop(node: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(node.pid, sig)
        except ProcessLookupError:
            return
        try:
            node.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:
            time.sleep(1.0)  # let its children exit before the group is killed outright
            try:
                os.killpg(node.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return


@pytest.fixture(scope="module")
def cluster(tau2_dir: Path) -> Iterator[str]:
    """The address of a two-node Ray cluster on this machine."""
    try:
        import ray
    except ImportError:
        _unavailable("the ray extra is not installed (pip install 'agentspec[ray]')")
    from agentspec.cluster.ray_episodes import connect

    temp = Path(tempfile.mkdtemp(prefix="ar", dir="/tmp"))  # short: Ray's socket paths have a length limit
    port = _free_port()
    address = f"{LOOPBACK_NODE_IP}:{port}"
    loopback = ("--node-ip-address", LOOPBACK_NODE_IP)
    nodes = [_start_node(temp, "--head", "--port", str(port), *loopback, "--include-dashboard=false",
                         "--temp-dir", str(temp / "t"))]
    deadline = time.monotonic() + 90

    def wait(what: str, ready: Any) -> None:
        while not ready():
            if time.monotonic() > deadline or any(n.poll() is not None for n in nodes):
                logs = "\n".join(p.read_text(errors="replace")[-800:] for p in temp.glob("node-*.log"))
                _unavailable(f"could not start {what} of a Ray cluster on this machine:\n{logs}")
            time.sleep(0.5)

    try:
        wait("the head node", lambda: "ray start --address" in (temp / "node-0.log").read_text(errors="replace"))
        nodes.append(_start_node(temp, "--address", address, *loopback))
        connect(address)  # as `agentspec run --ray ADDRESS` does
        wait("the second node", lambda: sum(1 for n in ray.nodes() if n["Alive"]) >= 2)
        assert {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]} == {LOOPBACK_NODE_IP}
        yield address
    except (ConnectionError, RuntimeError, ConfigError) as exc:
        _unavailable(f"could not start a Ray cluster on this machine: {exc}")
    finally:
        ray.shutdown()
        for node in reversed(nodes):
            _stop(node)
        shutil.rmtree(temp, ignore_errors=True)


def _records(out: Path) -> list[dict[str, Any]]:
    return json.loads((out / "results.json").read_text())["episodes"]["sa"] if (out / "results.json").exists() else []


def _by_task(outcome: Any) -> dict[str, dict[str, Any]]:
    records = [e.record() for e in outcome.modes["sa"].episodes]
    assert len(records) == len({r["task_id"] for r in records}), "a task appears more than once"
    return {r["task_id"]: r for r in records}


def _messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The episode's messages without call ids (the user simulator draws them at random, locally too)."""
    def plain(message: dict[str, Any]) -> dict[str, Any]:
        calls = [{k: v for k, v in c.items() if k != "id"} for c in message.get("tool_calls", [])]
        return {**{k: v for k, v in message.items() if k != "tool_call_id"}, "tool_calls": calls}
    return [plain(m) for m in record["messages"]]


def _comparable(record: dict[str, Any]) -> dict[str, Any]:
    """A record without its wall times (its wall duration and when it ended) and call ids (what a different process
    cannot share)."""
    timings = {k: v for k, v in record["timings"].items() if k != "wall_s"}
    kept = {k: v for k, v in record.items() if k != "ended_at"}
    return {**kept, "timings": timings, "messages": _messages(record)}


def _same(a: Any, b: Any) -> bool:
    """Equal, with virtual times equal up to float rounding (a local run's later episodes start at a clock
    offset, so their relative times are differences of larger numbers)."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _log_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _committed_steps(path: Path, task_key: str) -> list[int]:
    return [s["step"] for r in _log_records(path) if r["type"] == "commit" and r["task_id"] == task_key
            for s in r["steps"]]


@pytest.fixture(scope="module")
def local(tau2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The same tasks run in this process: what every cluster run must reproduce."""
    return _by_task(run(RunSpec.of(**BASE, data_dir=str(tau2_dir), out=str(tmp_path_factory.mktemp("local")))))


class StoppingBench:
    """The tau2 bench, except that one task's worker stops at its ``at``-th committed change of its live state (a call executed there, by agent or user, or a fork promoted): it kills its own
    process (``kill``) or hangs (as a driver killed around it would leave it), once (a marker file says it did)."""

    def __init__(self, inner: Any, task_id: str, marker: Path, *, at: int = 2, kill: bool = True) -> None:
        self.inner, self.task_id, self.marker, self.at, self.kill = inner, task_id, marker, at, kill

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet while unpickling: no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    @asynccontextmanager
    async def open_backend(self, task: Any, *, solo: bool) -> AsyncIterator[Any]:
        async with self.inner.open_backend(task, solo=solo) as backend:
            if task.id == self.task_id and not self.marker.exists():
                self._arm(backend)
            yield backend

    def _arm(self, backend: Any) -> None:
        changes = [0]
        execute, commit = backend.execute, backend.commit

        def count() -> None:
            changes[0] += 1
            if changes[0] == self.at:
                self.marker.write_text(str(os.getpid()))
                if self.kill:
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(3600)  # blocks the worker's event loop: it never commits again

        async def stopping_execute(call: Any, requestor: str = "assistant") -> Any:
            count()
            return await execute(call, requestor)

        async def stopping_commit(sandbox: Any) -> None:
            count()
            await commit(sandbox)

        backend.execute, backend.commit = stopping_execute, stopping_commit


def _stopping(tau2_dir: Path, local: dict[str, dict[str, Any]], marker: Path, *, kill: bool) -> tuple[Any, str]:
    import ray.cloudpickle

    from agentspec.bench.registry import open_bench

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    longest = max(local.values(), key=lambda r: len(r["execution"]["sources"]))
    assert len(longest["execution"]["sources"]) > 2, "the test needs a task with more than 2 committed steps"
    bench = StoppingBench(open_bench("tau2-telecom", tau2_dir), longest["task_id"], marker, kill=kill)
    return bench, longest["task_id"]


def test_cluster_run_equals_local_run_task_for_task(cluster: str, local: dict[str, dict[str, Any]], tau2_dir: Path,
                                                     tmp_path: Path) -> None:
    outcome = run(RunSpec.of(**BASE, data_dir=str(tau2_dir), out=str(tmp_path), cluster=cluster))
    remote = _by_task(outcome)
    assert list(remote) == list(local)  # job order kept
    for task_id, record in local.items():
        assert _same(_comparable(remote[task_id]), _comparable(record)), task_id
    tasks = [r for r in _log_records(tmp_path / "run-sa.log.jsonl") if r["type"] == "task"]
    assert Counter(r["task_id"] for r in tasks) == Counter(f"{t}#0" for t in local)
    assert not list((tmp_path / "ray-parts" / "sa").glob("*.jsonl"))  # every part merged


def test_a_killed_worker_loses_nothing_and_every_result_appears_once(
        cluster: str, local: dict[str, dict[str, Any]], tau2_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "killed"
    bench, victim = _stopping(tau2_dir, local, marker, kill=True)
    spec = RunSpec.of(**BASE, data_dir=str(tau2_dir), out=str(tmp_path / "out"), cluster=cluster)
    remote = _by_task(run(spec, bench=bench))
    assert marker.exists(), "the worker playing the victim task was not killed"
    assert set(remote) == set(local)
    for task_id, record in local.items():
        assert remote[task_id]["reward"] == record["reward"]
        assert remote[task_id]["messages"] and _messages(remote[task_id]) == _messages(record), task_id
        if task_id != victim:
            assert _same(_comparable(remote[task_id]), _comparable(record)), task_id
    log = tmp_path / "out" / "run-sa.log.jsonl"
    assert Counter(r["task_id"] for r in _log_records(log) if r["type"] == "task") == Counter(f"{t}#0" for t in local)
    steps = _committed_steps(log, f"{victim}#0")
    assert steps == list(range(len(steps))), f"a committed step was applied again after the kill: {steps}"
    assert len(steps) == len(local[victim]["execution"]["sources"])


_DRIVER = """
import sys
sys.path.insert(0, {tests!r})
import ray.cloudpickle, test_ray_cluster as t
from agentspec.pipeline import run
from agentspec.bench.registry import open_bench
from agentspec.run_spec import RunSpec
from pathlib import Path
ray.cloudpickle.register_pickle_by_value(t)
bench = t.StoppingBench(open_bench("tau2-telecom", {data!r}), {victim!r}, Path({marker!r}), kill=False)
run(RunSpec.of(**t.BASE, data_dir={data!r}, out={out!r}, cluster={cluster!r}), bench=bench)
"""


def _wait_for(what: str, done: Any, driver: subprocess.Popen[bytes], output: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if driver.poll() is not None:
            pytest.fail(f"the driver exited before {what}: {output.read_text(errors='replace')[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_resume_after_a_full_stop_reapplies_nothing(cluster: str, local: dict[str, dict[str, Any]], tau2_dir: Path,
                                                    tmp_path: Path) -> None:
    import ray

    marker, out = tmp_path / "hung", tmp_path / "out"
    _, victim = _stopping(tau2_dir, local, marker, kill=False)
    log = out / "run-sa.log.jsonl"
    code = _DRIVER.format(tests=str(Path(__file__).parent), data=str(tau2_dir), victim=victim, marker=str(marker),
                          out=str(out), cluster=cluster)
    with (tmp_path / "driver.log").open("wb") as output:
        driver = subprocess.Popen([sys.executable, "-c", code], stdout=output, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        _wait_for("the victim task hung mid-episode", marker.exists, driver, tmp_path / "driver.log")
        _wait_for("the other tasks finished", lambda: log.exists() and sum(
            r["type"] == "task" for r in _log_records(log)) == TASKS - 1, driver, tmp_path / "driver.log")
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and everything it started; Ray ends its tasks
        driver.wait()
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < 2:  # the hung worker is gone with its driver
        assert time.monotonic() < deadline, "the stopped driver's tasks still hold the cluster"
        time.sleep(0.2)
    before = _committed_steps(log, f"{victim}#0") + _committed_steps(next((out / "ray-parts" / "sa").glob("*")),
                                                                      f"{victim}#0")
    assert before and before == list(range(len(before))), "the victim should have committed steps before it hung"
    assert len(before) < len(local[victim]["execution"]["sources"])

    resumed = _by_task(run(RunSpec.of(**BASE, data_dir=str(tau2_dir), out=str(out), cluster=cluster, resume=True)))
    assert set(resumed) == set(local)
    for task_id, record in local.items():
        assert resumed[task_id]["reward"] == record["reward"]
        assert resumed[task_id]["messages"] and _messages(resumed[task_id]) == _messages(record), task_id
    assert Counter(r["task_id"] for r in _log_records(log) if r["type"] == "task") == Counter(f"{t}#0" for t in local)
    steps = _committed_steps(log, f"{victim}#0")
    assert steps == list(range(len(steps))) and len(steps) == len(local[victim]["execution"]["sources"])


def test_a_local_run_never_imports_ray(tau2_dir: Path, tmp_path: Path) -> None:
    code = ("import sys, json; from agentspec.pipeline import run; from agentspec.run_spec import RunSpec; "
            f"o = run(RunSpec.of(**{BASE!r}, data_dir={str(tau2_dir)!r}, out={str(tmp_path)!r})); "
            "print(json.dumps([len(o.modes['sa'].episodes), 'ray' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == [TASKS, False]


@pytest.mark.parametrize(("fields", "message"), [
    ({"record": "REC"}, "record without --ray"),
    ({"verify_macros": True}, "without --ray"),
])
def test_what_a_cluster_cannot_do_is_refused_before_any_task(tau2_dir: Path, tmp_path: Path, fields: dict[str, Any],
                                                             message: str) -> None:
    fields = {k: str(tmp_path / "rec") if v == "REC" else v for k, v in fields.items()}
    spec = RunSpec.of(**BASE, data_dir=str(tau2_dir), cluster="127.0.0.1:1", **fields)
    with pytest.raises(ConfigError, match=message):
        run(spec)


def test_ray_flag_needs_an_address_or_none(tau2_dir: Path) -> None:
    with pytest.raises(ConfigError, match="ADDRESS is empty"):
        RunSpec.of(**BASE, cluster=" ")
    from agentspec.cli import main

    # (a plain run is sequential mode through the same road, so a bare --ray runs it on a local cluster)
    assert main(["run", "--bench", "tau2-telecom", "--agent", "oracle", "--ray", " ", "--data-dir", str(tau2_dir)]) == 2


def test_agentspec_run_with_ray_writes_the_same_results_file(cluster: str, local: dict[str, dict[str, Any]],
                                                             tau2_dir: Path, tmp_path: Path) -> None:
    from agentspec.cli import main

    argv = ["run", "--bench", "tau2-telecom", "--split", "small", "--limit", "2", "--agent", "oracle", "--mode", "sa",
            "--speculator-model", "noisy-oracle:0.8", "--latency-model", "smc-paper", "--data-dir", str(tau2_dir),
            "--out", str(tmp_path), "--no-progress", "--ray", cluster]
    assert main(argv) == 0
    records = _records(tmp_path)
    assert [r["task_id"] for r in records] == list(local)[:2]
    assert all(_same(_comparable(r), _comparable(local[r["task_id"]])) for r in records)


def test_a_merge_cut_short_is_merged_again_without_changing_what_the_log_says(tau2_dir: Path, tmp_path: Path) -> None:
    from agentspec.cluster.parts import merge_finished, part_path
    from agentspec.runtime.runlog.writer import RunLog

    run(RunSpec.of(**{**BASE, "limit": 1}, data_dir=str(tau2_dir), out=str(tmp_path / "one")))
    whole = tmp_path / "one" / "run-sa.log.jsonl"
    expected = RunLog.read(whole)
    (key,) = expected
    part = part_path(tmp_path, "sa", key)
    part.parent.mkdir(parents=True)
    shutil.copy(whole, part)
    log = tmp_path / "run-sa.log.jsonl"
    lines = whole.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[: len(lines) // 2 + 1]))  # the driver died half-way through appending the part
    assert RunLog.read(log)[key].result is None

    assert merge_finished(tmp_path, "sa", log) == 1
    assert not part.exists()
    merged = RunLog.read(log)
    assert merged[key].result == expected[key].result and merged[key].steps == expected[key].steps


def test_a_part_merged_whole_before_the_driver_stopped_is_not_merged_again(tau2_dir: Path, tmp_path: Path) -> None:
    """The kill campaign's finding: a driver killed between appending a finished part and deleting it left the part;
    the resume merged it again (its steps committed twice, the task finished twice in the log)."""
    from agentspec.cluster.parts import merge_finished, part_path
    from agentspec.runtime.runlog.writer import RunLog

    run(RunSpec.of(**{**BASE, "limit": 1}, data_dir=str(tau2_dir), out=str(tmp_path / "one")))
    whole = tmp_path / "one" / "run-sa.log.jsonl"
    (key,) = RunLog.read(whole)
    part = part_path(tmp_path, "sa", key)
    part.parent.mkdir(parents=True)
    shutil.copy(whole, part)
    log = tmp_path / "run-sa.log.jsonl"
    shutil.copy(whole, log)  # the part is in the log whole: the driver died before it deleted the part
    before = log.read_text()

    assert merge_finished(tmp_path, "sa", log) == 1
    assert not part.exists() and log.read_text() == before


def test_a_resume_whose_first_life_left_no_header_starts_the_log_with_the_runs_settings(tmp_path: Path) -> None:
    """A driver killed before its log's header was written (then resumed, and killed again) left parts merged under
    a header that recorded no settings, which the next resume refused; the resume now writes the header first."""
    from agentspec.batch import ModeRun, log_config
    from agentspec.cluster.parts import merge_part
    from agentspec.cluster.ray_episodes import _prepare_log
    from agentspec.runtime.runlog.writer import RunLog

    spec = RunSpec.of(agent="oracle", out=str(tmp_path), resume=True)
    mode = spec.modes[0]
    path = tmp_path / f"run-{mode.name}.log.jsonl"
    path.write_text('{"type":"lo')  # killed while it wrote its header
    batch = ModeRun(spec, mode, bench=None)  # type: ignore[arg-type]  # the log check never asks the bench
    assert _prepare_log(batch, []) == {}
    part = tmp_path / "part.jsonl"  # a task of the resumed run finishes on a worker; the driver merges its part
    done = RunLog(part)
    done.finish("t1#0", {"reward": 1.0})
    done.close()
    merge_part(part, path)
    assert RunLog.read(path, log_config(spec, mode))["t1#0"].result == {"reward": 1.0}  # under this run's settings
    assert _prepare_log(batch, [])["t1#0"].result == {"reward": 1.0}  # the next resume takes it


@dataclasses.dataclass(frozen=True)
class _Task:
    id: str
    question: str


def test_a_resume_on_ray_refuses_a_task_whose_data_changed(tmp_path: Path) -> None:
    """The driver checks the log against the jobs it runs, as a local resume does: a task whose data changed since
    its result was logged is not taken from the log (no cluster needed: the check comes before any task)."""
    from agentspec.batch import ModeRun, log_config
    from agentspec.cluster.ray_episodes import _prepare_log
    from agentspec.runtime.runlog.records import data_digest
    from agentspec.runtime.runlog.writer import RunLog

    spec = RunSpec.of(agent="oracle", out=str(tmp_path), resume=True)
    mode = spec.modes[0]
    path = tmp_path / f"run-{mode.name}.log.jsonl"
    log = RunLog(path, log_config(spec, mode))
    log.finish("t1#0", {"reward": 1.0}, data_digest(_Task("t1", "what is 2+2?")))
    log.close()
    batch = ModeRun(spec, mode, bench=None)  # type: ignore[arg-type]  # the log check never asks the bench
    same = _prepare_log(batch, [(_Task("t1", "what is 2+2?"), 0)])
    assert same["t1#0"].result == {"reward": 1.0}
    with pytest.raises(ConfigError, match="the data of task 't1' changed since its result was logged"):
        _prepare_log(batch, [(_Task("t1", "what is 3+3?"), 0)])


def test_a_forged_part_is_refused_not_signed_into_the_run_log(tmp_path: Path) -> None:
    """A merge signs the part's records again after the run log's last one: a record edited in the part is refused
    with its line first, so the merge never vouches for it."""
    from agentspec.cluster.parts import merge_part
    from agentspec.runtime.runlog.writer import RunLog

    part, run_log = tmp_path / "part.jsonl", tmp_path / "run-sa.log.jsonl"
    log = RunLog(part)
    log.finish("t1#0", {"reward": 0.0})
    log.close()
    header, task = part.read_text().splitlines(keepends=True)
    part.write_text(header + task.replace('"reward":0.0', '"reward":1.0'))
    with pytest.raises(ConfigError, match="part.jsonl line 2: the record's signature does not match"):
        merge_part(part, run_log)
    assert part.exists() and RunLog.read(run_log) == {}


def test_a_cluster_address_where_nothing_listens_fails_in_seconds(tau2_dir: Path) -> None:
    """Nothing at 127.0.0.1:1: one line naming the address, in seconds, not Ray's minutes-long wait (a process of
    its own, as a user runs it: this one may already be connected to the module's cluster)."""
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'agentspec[ray]')")
    argv = ["run", "--bench", "tau2-telecom", "--split", "small", "--limit", "1", "--agent", "oracle", "--mode", "sa",
            "--speculator-model", "noisy-oracle:0.8", "--data-dir", str(tau2_dir), "--no-progress", "--ray",
            "127.0.0.1:1"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    started = time.monotonic()
    done = subprocess.run([str(VENV_BIN / "agentspec"), *argv], capture_output=True, text=True, timeout=120, env=env)
    elapsed = time.monotonic() - started
    err = done.stderr.strip()
    assert done.returncode == 2 and elapsed < 30, (done.returncode, elapsed, err)
    assert len(err.splitlines()) == 1 and "cannot reach the Ray cluster at 127.0.0.1:1: nothing answers" in err, err


def test_the_probe_names_the_address_this_machine_reaches_a_cluster_from() -> None:
    from agentspec.cluster.ray_episodes import probe

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert probe(f"127.0.0.1:{listener.getsockname()[1]}") == "127.0.0.1"
    with pytest.raises(ConfigError, match="must be HOST:PORT"):
        probe("127.0.0.1")


def test_a_recorded_agent_plays_on_the_cluster_as_here(cluster: str, tau2_dir: Path, tmp_path: Path) -> None:
    """``--agent replay`` on its recorded clock: each worker reads the recording and plays its episodes as this
    process does (the same records, virtual times included)."""
    recording = Path(tau2_dir).parent / "traces" / "sierra_gpt-4.1_telecom_default.json"
    if not recording.is_file():
        pytest.skip(f"no recorded run at {recording}")
    fields = {"bench": "tau2-telecom", "data_dir": str(tau2_dir), "agent": "replay", "runs": str(recording),
              "limit": 3, "modes": "sa", "speculator_model": "noisy-oracle:1.0", "latency_model": "recorded",
              "tool_latency": 1.0, "progress": False}
    here = _by_task(run(RunSpec.of(**fields, out=str(tmp_path / "here"))))
    there = _by_task(run(RunSpec.of(**fields, out=str(tmp_path / "there"), cluster=cluster)))
    assert list(there) == list(here) and len(here) == 3
    for task_id, record in here.items():
        assert _same(_comparable(there[task_id]), _comparable(record)), task_id
