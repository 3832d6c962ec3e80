"""A kill campaign (issue 37, Jepsen-style): runs killed with SIGKILL at seeded random moments, resumed with
``--resume`` until they finish, and checked against an uninterrupted run of the same command.

For each bench: one uninterrupted run (the reference: its results, its run logs' committed calls, and for the MCP
bench its store; its duration T and how many log records, intents and macro intents it wrote, as they appeared),
then trials until ``--kills`` SIGKILLs were delivered.  A trial starts the same command in a fresh folder and kills
it (its whole process group: agentspec and the servers, sandboxes and workers it started) at a moment drawn from a
seeded generator, of one of three kinds:

* ``time``: uniformly in [0, T) after the start (a kill that comes after the run ended is not a kill);
* ``record``: as soon as the run's logs hold the k-th record (k uniform over the reference's records);
* ``intent``: as soon as the k-th intent is logged, i.e. while its call (or batch) is under way: mid-tool for the
  MCP server's slow writing tool, and (half of these, where macros fire) at a macro batch's intents, to land in
  the middle of a macro commit.

Then ``--resume`` until exit 0; a resume is itself killed (a ``time`` kill) with probability ``--rekill``.  Where a
resume stops with the one line "started ... and never confirmed" (exit 2; only the MCP server outside agentspec
can cause it), it counts as *reported*, and the campaign decides as a user would: the call's item is in the store
more times than the run logs' committed calls put it there, so the write happened (``--resume-skip-uncertain``),
or not (``--resume-retry-uncertain``).  Any other failing exit is a failure.  The finished trial is then compared
with the reference, task for task and mode for mode:

* *identical*: reward, termination, evaluation, error and the messages (the calls in order, by name and
  arguments, and what they answered; call ids and wall times ignored), and each task's committed calls in the run
  log in order; a call recorded as not done by ``--resume-skip-uncertain`` may answer that it was not done;
* *duplicates*: committed calls in excess of the reference's (a step committed twice in a log, a task finished
  twice, more calls of a kind), and for the MCP bench, items in its store in excess of the reference's store;
* *lost*: the same, missing (a task without a result, fewer calls, an item missing from the store).

Benches: ``tau2-solo`` and ``tau2-user`` (tau2-telecom, oracle agent, ``--mode sa,smc`` with a noisy-oracle
speculator on the virtual clock), ``workspace`` (workspace-demo, ``--mode sequential,sa``: bubblewrap),
``appworld`` (our fixture tasks on the real engine, ``--mode sa``: the AppWorld venv), ``mcp``
(tests/servers/slow_writer.py, not sandboxed: its store is a file outside agentspec; ``--mode sequential,sa``) and
``ray`` (tau2-telecom ``--mode sa`` on a one-node Ray cluster started here).  ``--scale quick`` (the test suite's)
runs fewer tasks than ``full``.  A bench whose prerequisite is missing is skipped with the reason.

    python experiments/kill_campaign.py --kills 20 --seed 0                  # all benches, full scale
    python experiments/kill_campaign.py --kills 3 --seed 1 --benches mcp --scale quick

Prints progress to stderr, then one JSON object (one line) and the table on stdout.  Trial folders are kept under
``--work`` (default: a temporary folder) only where a trial failed, or with ``--keep``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TAU2_DATA = REPO.parent / "shared" / "data" / "tau2"
SLOW_WRITER = REPO / "tests" / "servers" / "slow_writer.py"
BENCHES = ("tau2-solo", "tau2-user", "workspace", "appworld", "mcp", "ray")
SCALES = ("quick", "full")
UNCERTAIN = re.compile(r"the stopped run started (\w+)\((.*)\) \(step (\d+)\) and never confirmed it")
SKIPPED = "Error: not done: the run stopped before this call's result"
WRITE_DELAY_S = 0.6
MAX_RUNS_PER_TRIAL = 8
ORPHAN_GRACE_S = 15.0


# --------------------------------------------------------------------------- processes


def _become_subreaper() -> None:
    """Processes the killed run started in sessions of their own (AppWorld's worker, sandboxes) become this
    process's children when the run dies, so the campaign sees them, waits for them and reaps them."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, process group) of ``pid``, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2])


def _processes() -> list[tuple[int, str, int, int]]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat is not None:
                found.append((int(entry.name), *stat))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    except OSError:
        return "?"


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _kill_group(proc: subprocess.Popen[bytes], keep: set[int]) -> list[str]:
    """SIGKILL ``proc``'s process group, then wait until it and every orphan it left (processes it started in
    sessions of their own, now this process's children) are gone.  Orphans still alive after a grace period are
    killed too; their command lines are returned (a kill should leave nothing running)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    return _settle_orphans(proc.pid, keep)


def _settle_orphans(pgid: int, keep: set[int]) -> list[str]:
    me, deadline, left = os.getpid(), time.monotonic() + ORPHAN_GRACE_S, []
    while True:
        alive = [(pid, state) for pid, state, ppid, group in _processes()
                 if pid not in keep and pid != me and (group == pgid or ppid == me)]
        for pid, state in alive:
            if state in "ZX":
                _reap(pid)
        alive = [pid for pid, state in alive if state not in "ZX"]
        if not alive:
            return left
        if time.monotonic() > deadline:
            for pid in alive:
                left.append(_cmdline(pid))
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5.0
        time.sleep(0.05)


# --------------------------------------------------------------------------- the run logs


def _log_files(out: Path) -> list[Path]:
    """The run logs of ``out``: one per mode, and Ray's per-task parts not merged yet."""
    files = sorted(out.glob("run-*.log.jsonl"))
    parts = out / "ray-parts"
    if parts.is_dir():
        files += sorted(parts.glob("*/*.jsonl"))
    return files


class LogWatch:
    """Counts the records, intents and macro intents appended to a run's logs, as they appear."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.files: dict[tuple[str, int], list[Any]] = {}
        self.records = self.intents = self.macro_intents = 0
        self.last_record_s = 0.0

    def poll(self, now: float) -> None:
        for path in _log_files(self.out):
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            state = self.files.setdefault((str(path), stat.st_ino), [0, b""])
            if stat.st_size <= state[0]:
                continue
            try:
                with path.open("rb") as handle:
                    handle.seek(state[0])
                    data = handle.read(stat.st_size - state[0])
            except FileNotFoundError:
                continue
            state[0] += len(data)
            lines = (state[1] + data).split(b"\n")
            state[1] = lines.pop()
            for line in lines:
                self.records += 1
                if b'"type":"intent"' in line:
                    self.intents += 1
                    self.macro_intents += b'"source":"macro"' in line
            if lines:
                self.last_record_s = now


@dataclass
class TaskView:
    """What a run's logs say about one task (unverified: the campaign only inspects them)."""

    intents: dict[int, dict[str, Any]] = field(default_factory=dict)
    commits: Counter[int] = field(default_factory=Counter)
    finished: int = 0


def read_logs(out: Path) -> dict[tuple[str, str], TaskView]:
    """Per (mode, task key) what the logs hold (a torn last record is left out)."""
    tasks: dict[tuple[str, str], TaskView] = {}
    for path in _log_files(out):
        mode = path.name[len("run-"):-len(".log.jsonl")] if path.parent == out else path.parent.name
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        for line in text.split("\n")[:-1]:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("type") not in ("intent", "commit", "task"):
                continue
            view = tasks.setdefault((mode, record["task_id"]), TaskView())
            if record["type"] == "intent":
                view.intents[record["step"]] = record
            elif record["type"] == "commit":
                view.commits.update(entry["step"] for entry in record["steps"])
            else:
                view.finished += 1
    return tasks


def log_sizes(out: Path) -> dict[str, int]:
    sizes = {}
    for path in _log_files(out):
        try:
            sizes[str(path)] = path.stat().st_size
        except FileNotFoundError:
            pass
    return sizes


def landing(out: Path, before: dict[str, int]) -> dict[str, Any]:
    """Where a kill left the logs, judged by what the killed run itself appended (``before``: the logs' sizes when
    it started): nothing (``before-records``: killed while starting), an intent last (``mid-call``, or
    ``mid-macro`` where it is a macro batch's: its call or batch was under way), a record cut short
    (``torn-record``), or a commit or task record last (``between-records``)."""
    changed = []
    for path in _log_files(out):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        if stat.st_size > before.get(str(path), 0):
            changed.append((stat.st_mtime_ns, str(path), before.get(str(path), 0)))
    if not changed:
        return {"at": "before-records"}
    _, name, start = max(changed)
    try:
        lines = Path(name).read_bytes()[start:].split(b"\n")
    except FileNotFoundError:  # a Ray part merged and removed meanwhile
        return {"at": "between-records"}
    if lines[-1]:
        return {"at": "torn-record", "file": Path(name).name}
    try:
        last = json.loads(lines[-2])
    except (IndexError, json.JSONDecodeError):
        return {"at": "torn-record", "file": Path(name).name}
    if last.get("type") == "intent":
        at = "mid-macro" if last.get("source") == "macro" else "mid-call"
        return {"at": at, "file": Path(name).name, "task": last["task_id"], "step": last["step"],
                "call": last["call"]["name"]}
    return {"at": "between-records", "file": Path(name).name, "last": last.get("type")}


def committed_calls(out: Path) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Each task's committed calls in step order, from the finished run's logs (name, canonical arguments)."""
    tasks = read_logs(out)
    calls = {}
    for key, view in tasks.items():
        calls[key] = [(view.intents[step]["call"]["name"],
                       json.dumps(view.intents[step]["call"]["arguments"], sort_keys=True))
                      for step in sorted(view.commits) if step in view.intents]
    return calls


# --------------------------------------------------------------------------- results


def _message(message: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in message.items() if k not in ("tool_call_id", "tool_calls")}
    if message.get("tool_calls"):
        kept["tool_calls"] = [{k: v for k, v in c.items() if k != "id"} for c in message["tool_calls"]]
    return kept


def _split_call_log(evaluation: Any) -> tuple[Any, dict[str, Any] | None]:
    """AppWorld's evaluation without the world's own call logs (``end_state.files["logs/..."]``: every API call
    the world served, in order), and those logs.  They are compared apart: a resumed episode's fresh world replays
    the committed calls except the read-only ones (journal.replay), so its call log lacks the reads made before
    the kill, while its databases (``end_state.appended``) must be the same."""
    if not isinstance(evaluation, dict) or not isinstance(evaluation.get("end_state"), dict):
        return evaluation, None
    files = evaluation["end_state"].get("files")
    if not isinstance(files, dict):
        return evaluation, None
    logs = {k: v for k, v in files.items() if k.startswith("logs/")}
    kept = {k: v for k, v in files.items() if not k.startswith("logs/")}
    return {**evaluation, "end_state": {**evaluation["end_state"], "files": kept}}, logs


def episodes(out: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Each episode of ``out/results.json`` without what a resume may change (wall times, ids, figures)."""
    path = out / "results.json"
    if not path.is_file():
        return {}
    results = json.loads(path.read_text())
    found = {}
    for mode, records in results["episodes"].items():
        for record in records:
            evaluation, call_log = _split_call_log(record.get("evaluation"))
            found[(mode, record["task_id"], record.get("trial", 0))] = {
                "reward": record.get("reward"), "termination": record.get("termination"),
                "evaluation": evaluation, "error": record.get("error"), "call_log": call_log,
                "messages": [_message(m) for m in record.get("messages") or []]}
    return found


def store_items(store: Path | None) -> Counter[str]:
    if store is None or not store.is_file():
        return Counter()
    return Counter(store.read_text(encoding="utf-8").splitlines())


@dataclass
class Snapshot:
    """What a finished run left: its episodes, its committed calls, its store."""

    episodes: dict[tuple[str, str, int], dict[str, Any]]
    calls: dict[tuple[str, str], list[tuple[str, str]]]
    log_problems: list[str]
    log_duplicates: int
    """Records the run logs hold more than once: a step committed again, a task finished again."""
    store: Counter[str]

    @classmethod
    def of(cls, out: Path, store: Path | None) -> Snapshot:
        tasks = read_logs(out)
        problems, again = [], 0
        for (mode, task), view in sorted(tasks.items()):
            twice = sorted(step for step, count in view.commits.items() if count > 1)
            if twice:
                problems.append(f"{mode} {task}: steps {twice} committed more than once in the log")
                again += sum(count - 1 for count in view.commits.values())
            if view.finished > 1:
                problems.append(f"{mode} {task}: finished {view.finished} times in the log")
                again += view.finished - 1
            if sorted(view.commits) != list(range(len(view.commits))):
                problems.append(f"{mode} {task}: committed steps {sorted(view.commits)} have a gap")
        leftover = _log_files(out)[len(list(out.glob("run-*.log.jsonl"))):]
        problems += [f"Ray part {p.relative_to(out)} left unmerged" for p in leftover]
        return cls(episodes(out), committed_calls(out), problems, again, store_items(store))


def _same_messages(got: list[dict[str, Any]], want: list[dict[str, Any]], skips_allowed: bool) -> bool:
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        if a == b:
            continue
        # A skipped call answers "not done" as an error observation, where the reference has the call's answer.
        said = ("content", "error")
        skipped = (skips_allowed and a.get("role") == "tool" and str(a.get("content", "")).startswith(SKIPPED)
                   and {k: v for k, v in a.items() if k not in said} == {k: v for k, v in b.items() if k not in said})
        if not skipped:
            return False
    return True


def _same_episode(got: dict[str, Any], want: dict[str, Any], skips_allowed: bool) -> list[str]:
    differ = [k for k in ("reward", "termination", "evaluation", "error") if got[k] != want[k]]
    if not _same_messages(got["messages"], want["messages"], skips_allowed):
        differ.append("messages")
    return differ


def compare(got: Snapshot, want: Snapshot, *, skips_allowed: bool) -> dict[str, Any]:
    """The trial against the reference: identical or not (and what differs), effects applied more than once or
    lost, and records the run log holds more than once."""
    diffs: list[str] = list(got.log_problems)
    duplicates = lost = 0
    notes: list[str] = []
    for key, expected in sorted(want.episodes.items(), key=lambda kv: str(kv[0])):
        have = got.episodes.get(key)
        if have is None:
            diffs.append(f"{key}: no result")
            lost += 1
            continue
        if have["call_log"] != expected["call_log"]:
            notes.append(f"{key}: the world's call log differs (a replay skips read-only calls)")
        differ = _same_episode(have, expected, skips_allowed)
        if differ:
            diffs.append(f"{key}: {', '.join(differ)} differ (got reward {have['reward']}, {have['termination']}; "
                         f"want {expected['reward']}, {expected['termination']})")
    diffs += [f"{key}: a result the reference has not" for key in got.episodes if key not in want.episodes]
    for key, calls in sorted(want.calls.items()):
        have_calls = got.calls.get(key, [])
        if have_calls != calls:
            extra, missing = Counter(have_calls) - Counter(calls), Counter(calls) - Counter(have_calls)
            duplicates += sum(extra.values())
            lost += sum(missing.values())
            diffs.append(f"{key}: committed calls differ: {len(have_calls)} vs {len(calls)}; extra "
                         f"{sorted(extra)[:3]}, missing {sorted(missing)[:3]}")
    diffs += [f"{key}: committed calls the reference has not" for key in got.calls if key not in want.calls]
    extra_items, missing_items = got.store - want.store, want.store - got.store
    if extra_items or missing_items:
        duplicates += sum(extra_items.values())
        lost += sum(missing_items.values())
        diffs.append(f"store: extra {dict(extra_items)}, missing {dict(missing_items)}")
    return {"identical": not diffs, "duplicates": duplicates, "lost": lost, "log_duplicates": got.log_duplicates,
            "diffs": diffs, "notes": notes}


# --------------------------------------------------------------------------- benches


@dataclass
class Bench:
    """One row of the campaign: the command of a run into a trial folder, and what it needs."""

    name: str
    command: Callable[[Path], list[str]]
    store: Callable[[Path], Path] | None = None
    after_kill: Callable[[], None] = lambda: None
    close: Callable[[], None] = lambda: None
    keep_pids: set[int] = field(default_factory=set)
    env: dict[str, str] = field(default_factory=dict)
    macros: bool = False


def _agentspec(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentspec.cli", "run", *args, "--no-progress"]


def _tau2(solo: bool, scale: str) -> list[str]:
    split = ["--split", "small"] if scale == "quick" else ["--split", "base"]
    return ["--bench", "tau2-telecom", *(["--solo"] if solo else []), "--agent", "oracle", "--data-dir", str(TAU2_DATA),
            *split, "--mode", "sa,smc", "--speculator-model", "noisy-oracle:0.8", "--latency-model", "smc-paper"]


def _tau2_missing() -> str | None:
    if not (TAU2_DATA / "telecom" / "tasks.json").is_file():
        return f"tau2 data not found at {TAU2_DATA}: the campaign needs ../shared/data/tau2 beside the checkout"
    return None


def _bwrap_missing() -> str | None:
    """Why workspace-demo's jail cannot start here (the backend's own message), or None."""
    import anyio

    from agentspec.errors import SnapshotError
    from envs.workspace.environment import open_workspace

    async def start() -> None:
        async with open_workspace("copy"):
            pass

    try:
        anyio.run(start)
    except SnapshotError as exc:
        return str(exc)
    return None


def _appworld() -> tuple[str, str] | str:
    """(fixture data folder, the AppWorld venv's python), made as tests/test_appworld.py makes them, or why not."""
    import hashlib

    from agentspec.errors import ConfigError
    from envs.appworld import fixtures
    from envs.appworld.venv import ensure_venv, venv_path

    try:
        venv = ensure_venv()
    except ConfigError as exc:
        return f"the AppWorld venv cannot be made here: {exc}"
    key = hashlib.sha256(Path(fixtures.__file__).read_bytes() + venv["appworld_version"].encode()).hexdigest()[:12]
    root = venv_path().parent / f"fixtures-{key}"
    if not (root / "data" / "AGENTSPEC_FIXTURES.txt").is_file():
        done = subprocess.run([venv["python"], fixtures.__file__, str(root)], check=False, capture_output=True,
                              text=True)
        if done.returncode != 0:
            return f"the AppWorld fixture tasks could not be generated: {done.stderr[-500:]}"
    return str(root), venv["python"]


def _mcp_tasks(work: Path, scale: str) -> Path:
    """Tasks for the slow writer: append, count (read-only), append, append, done."""
    path = work / "mcp-tasks.jsonl"
    with path.open("w") as handle:
        for task in ["t1"] if scale == "quick" else ["t1", "t2", "t3"]:
            items = [f"{task}-a", f"{task}-b", f"{task}-c"]
            gold = [{"name": "append_item", "arguments": {"item": items[0]}},
                    {"name": "count_item", "arguments": {"item": items[0]}},
                    *({"name": "append_item", "arguments": {"item": i}} for i in items[1:]),
                    {"name": "done", "arguments": {"answer": f"{task} stored"}}]
            handle.write(json.dumps({"id": task, "task": f"Store {', '.join(items)} in this order.",
                                     "answer": f"{task} stored", "gold": gold}) + "\n")
    return path


class RayCluster:
    """A one-node Ray cluster on this machine's loopback (as tests/test_ray_cluster.py starts one)."""

    def __init__(self, cpus: int = 2) -> None:
        from agentspec.cluster.ray_episodes import LOOPBACK_NODE_IP, connect

        self.temp = Path(tempfile.mkdtemp(prefix="kc", dir="/tmp"))  # short: Ray's socket paths have a limit
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
        port = self._free_port()
        self.address = f"{LOOPBACK_NODE_IP}:{port}"
        command = [str(Path(sys.executable).parent / "ray"), "start", "--block", "--head", "--port", str(port),
                   "--node-ip-address", LOOPBACK_NODE_IP, "--num-cpus", str(cpus), "--object-store-memory",
                   "100000000", "--disable-usage-stats", "--include-dashboard=false", "--dashboard-agent-listen-port",
                   str(self._free_port()), "--temp-dir", str(self.temp / "t")]
        with (self.temp / "node.log").open("wb") as log:
            self.node = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         env=self.env)
        deadline = time.monotonic() + 90
        while "ray start --address" not in (self.temp / "node.log").read_text(errors="replace"):
            if self.node.poll() is not None or time.monotonic() > deadline:
                log_tail = (self.temp / "node.log").read_text(errors="replace")[-800:]
                self.close()
                raise RuntimeError(f"could not start a Ray cluster on this machine:\n{log_tail}")
            time.sleep(0.3)
        os.environ.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
        self.ray = connect(self.address)  # to see when a killed driver's tasks are gone
        self.cpus = float(cpus)

    @staticmethod
    def _free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def idle(self, timeout: float = 120.0) -> None:
        """Until every CPU slot is free again: the killed driver's episodes are gone."""
        deadline = time.monotonic() + timeout
        while self.ray.available_resources().get("CPU", 0) < self.cpus:
            if time.monotonic() > deadline:
                raise RuntimeError("the killed driver's episodes still hold the Ray cluster after 120 s")
            time.sleep(0.2)

    def close(self) -> None:
        try:
            import ray

            ray.shutdown()
        except ImportError:
            pass
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.node.pid, sig)
                self.node.wait(wait)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        shutil.rmtree(self.temp, ignore_errors=True)


def open_bench(name: str, scale: str, work: Path) -> Bench | str:
    """The bench ``name`` at ``scale``, or why it cannot run here."""
    if name in ("tau2-solo", "tau2-user"):
        missing = _tau2_missing()
        if missing:
            return missing
        args = _tau2(name == "tau2-solo", scale)
        return Bench(name, lambda trial: _agentspec(*args, "--out", str(trial / "out")), macros=True)
    if name == "workspace":
        missing = _bwrap_missing()
        if missing:
            return missing
        tasks = ["--task-ids", "ws-rename-config,ws-fix-add"] if scale == "quick" else []
        args = ["--bench", "workspace-demo", "--agent", "oracle", "--mode", "sequential,sa", "--speculator-model",
                "noisy-oracle:0.8", "--latency-model", "smc-paper", *tasks]
        return Bench(name, lambda trial: _agentspec(*args, "--out", str(trial / "out")))
    if name == "appworld":
        found = _appworld()
        if isinstance(found, str):
            return found
        root, python = found
        tasks = "agspecnote_1" if scale == "quick" else "agspecnote_1,agspecaddr_1"
        args = ["--bench", "appworld", "--data-dir", root, "--bench-option", f"python={python}", "--agent", "oracle",
                "--mode", "sa", "--speculator-model", "noisy-oracle:0.8", "--task-ids", tasks]
        return Bench(name, lambda trial: _agentspec(*args, "--out", str(trial / "out")))
    if name == "mcp":
        try:
            import mcp  # noqa: F401
        except ImportError:
            return "the MCP SDK is not installed (pip install 'agentspec[mcp]')"
        tasks = _mcp_tasks(work, scale)
        modes = "sa" if scale == "quick" else "sequential,sa"

        def command(trial: Path) -> list[str]:
            server = shlex.join(["python", str(SLOW_WRITER), str(trial / "store.txt"), "--delay", str(WRITE_DELAY_S)])
            # We wrote the server: its read-only count_item may run speculatively (and again on a resume).
            return _agentspec("--bench", "mcp", "--mcp", server, "--bench-option", "trust_annotations=true", "--tasks",
                              str(tasks), "--agent", "oracle", "--mode", modes, "--speculator-model",
                              "noisy-oracle:0.8", "--out", str(trial / "out"))

        return Bench(name, command, store=lambda trial: trial / "store.txt")
    if name == "ray":
        missing = _tau2_missing()
        if missing:
            return missing
        try:
            import ray  # noqa: F401
        except ImportError:
            return "the ray extra is not installed (pip install 'agentspec[ray]')"
        try:
            cluster = RayCluster()
        except Exception as exc:  # noqa: BLE001 - any failure to start is the reason the row is skipped
            return f"could not start a Ray cluster on this machine: {exc}"
        limit = ["--limit", "4"] if scale == "quick" else []
        args = ["--bench", "tau2-telecom", "--agent", "oracle", "--data-dir", str(TAU2_DATA), "--split", "small",
                *limit, "--mode", "sa", "--speculator-model", "noisy-oracle:0.8", "--latency-model", "smc-paper",
                "--ray", cluster.address]
        return Bench(name, lambda trial: _agentspec(*args, "--out", str(trial / "out")), after_kill=cluster.idle,
                     close=cluster.close, keep_pids={cluster.node.pid}, env=cluster.env)
    raise ValueError(f"unknown bench {name!r}: one of {', '.join(BENCHES)}")


# --------------------------------------------------------------------------- one run, one trial


@dataclass
class Plan:
    """When to kill a run: ``time`` (``at`` seconds after its start), or ``delay`` seconds after its logs hold the
    ``at``-th ``record``, ``intent`` or ``macro`` intent."""

    kind: str
    at: float
    delay: float = 0.0
    seen: float | None = None

    def due(self, now: float, watch: LogWatch) -> bool:
        if self.kind == "time":
            return now >= self.at
        if self.seen is None:
            count = {"record": watch.records, "intent": watch.intents, "macro": watch.macro_intents}[self.kind]
            if count < self.at:
                return False
            self.seen = now
        return now >= self.seen + self.delay

    def describe(self) -> str:
        if self.kind == "time":
            return f"{self.at:.3f} s after the start"
        return f"{self.delay:.3f} s after {self.kind} #{int(self.at)}" if self.delay else f"at {self.kind} #{int(self.at)}"


@dataclass
class Outcome:
    rc: int | None
    seconds: float
    killed: bool
    stderr: str
    watch: LogWatch
    orphans: list[str]
    hung: bool = False
    landed: dict[str, Any] | None = None


def run_once(bench: Bench, command: list[str], trial: Path, label: str, plan: Plan | None,
             timeout: float) -> Outcome:
    out = trial / "out"
    env = {**os.environ, **bench.env}
    before = log_sizes(out)
    watch = LogWatch(out)
    watch.poll(0.0)  # what earlier lives logged: a resume's kill counts from there
    with (trial / f"{label}.stdout").open("wb") as stdout, (trial / f"{label}.stderr").open("wb") as stderr:
        started = time.monotonic()
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=stdout, stderr=stderr, start_new_session=True)
    killed = hung = False
    orphans: list[str] = []
    landed = None
    while proc.poll() is None:
        now = time.monotonic() - started
        watch.poll(now)
        if plan is not None and plan.due(now, watch):
            orphans = _kill_group(proc, bench.keep_pids)
            killed = True
            landed = landing(out, before)
            break
        if now > timeout:
            orphans = _kill_group(proc, bench.keep_pids)
            hung = True
            break
        time.sleep(0.0005 if plan is not None and plan.kind != "time" else 0.005)
    seconds = time.monotonic() - started
    if not killed and not hung:
        watch.poll(seconds)
        orphans = _settle_orphans(proc.pid, bench.keep_pids)
    err = (trial / f"{label}.stderr").read_text(errors="replace")
    return Outcome(proc.returncode, seconds, killed, err, watch, orphans, hung, landed)


@dataclass
class Reference:
    snapshot: Snapshot
    seconds: float
    records: int
    intents: int
    macro_intents: int


def reference(bench: Bench, work: Path, timeout: float) -> Reference:
    trial = work / f"{bench.name}-reference"
    trial.mkdir(parents=True)
    outcome = run_once(bench, bench.command(trial), trial, "run", None, timeout)
    if outcome.rc != 0:
        raise RuntimeError(f"{bench.name}: the uninterrupted run failed (exit {outcome.rc}): {outcome.stderr[-2000:]}")
    snapshot = Snapshot.of(trial / "out", bench.store(trial) if bench.store else None)
    if snapshot.log_problems:
        raise RuntimeError(f"{bench.name}: the uninterrupted run's logs: {snapshot.log_problems}")
    return Reference(snapshot, outcome.seconds, outcome.watch.records, outcome.watch.intents,
                     outcome.watch.macro_intents)


def draw_plan(rng: random.Random, ref: Reference, macros: bool) -> Plan:
    """Half the kills at a uniform moment of the run, a quarter at a record, a quarter at an intent (at once, or
    up to half a second after it: mid-tool for a slow tool)."""
    kind = rng.choice(["time", "time", "record", "intent"])
    if kind == "time":
        return Plan("time", rng.uniform(0.0, ref.seconds))
    if kind == "record":
        return Plan("record", rng.randint(1, max(1, ref.records)))
    delay = rng.choice([0.0, rng.uniform(0.0, 0.5)])
    if macros and ref.macro_intents and rng.random() < 0.5:
        return Plan("macro", rng.randint(1, ref.macro_intents), delay)
    return Plan("intent", rng.randint(1, max(1, ref.intents)), delay)


def _decide(bench: Bench, trial: Path, match: re.Match[str]) -> tuple[str, dict[str, Any]]:
    """As a user would: is the unconfirmed call's item in the store more often than the logs' committed calls of
    it put it there?  Then it happened (skip it), else it did not (run it again)."""
    name, arguments = match.group(1), match.group(2)
    try:
        item = json.loads(arguments)["item"]
    except (json.JSONDecodeError, KeyError, TypeError):
        found = re.search(r'"item": "((?:[^"\\]|\\.)*)"', arguments)
        item = json.loads(f'"{found.group(1)}"') if found else None
    assert bench.store is not None
    in_store = store_items(bench.store(trial))[item] if item is not None else 0
    committed = sum(1 for calls in committed_calls(trial / "out").values() for call in calls
                    if call[0] == name and json.loads(call[1]).get("item") == item)
    happened = name == "append_item" and in_store > committed  # the one tool that writes
    return ("--resume-skip-uncertain" if happened else "--resume-retry-uncertain"), {
        "call": f"{name}({arguments})", "in_store": in_store, "committed": committed, "happened": happened}


def run_trial(bench: Bench, ref: Reference, trial: Path, rng: random.Random, rekill: float,
              timeout: float) -> dict[str, Any]:
    trial.mkdir(parents=True)
    command = bench.command(trial)
    plan: Plan | None = draw_plan(rng, ref, bench.macros)
    extra: list[str] = []
    runs: list[dict[str, Any]] = []
    reported, decisions, failure = 0, [], None
    for index in range(MAX_RUNS_PER_TRIAL):
        resume = ["--resume", *extra] if index else []
        outcome = run_once(bench, command + resume, trial, f"run{index}", plan, timeout)
        entry: dict[str, Any] = {"resume": resume, "plan": plan.describe() if plan else None,
                                 "seconds": round(outcome.seconds, 3), "rc": outcome.rc, "killed": outcome.killed}
        if outcome.orphans:
            entry["orphans"] = outcome.orphans
        runs.append(entry)
        if outcome.killed:
            entry["landed"] = outcome.landed
            bench.after_kill()
            # A later resume is killed too, now and then (a kill during recovery).
            plan = Plan("time", rng.uniform(0.0, ref.seconds)) if rng.random() < rekill else None
            extra = []
            continue
        if outcome.hung:
            failure = f"run {index} did not end within {timeout:.0f} s"
            break
        if outcome.rc == 0:
            break
        match = UNCERTAIN.search(outcome.stderr)
        if outcome.rc == 2 and match and bench.store is not None:
            reported += 1
            flag, decision = _decide(bench, trial, match)
            decisions.append(decision)
            extra, plan = [flag], None
            continue
        failure = f"run {index} exited {outcome.rc}: {outcome.stderr.strip()[-1500:]}"
        break
    else:
        failure = f"not finished after {MAX_RUNS_PER_TRIAL} runs"
    kills = sum(1 for r in runs if r["killed"])
    result: dict[str, Any] = {"kills": kills, "runs": runs, "reported": reported, "decisions": decisions}
    if failure is None:
        got = Snapshot.of(trial / "out", bench.store(trial) if bench.store else None)
        skipped = any(d["happened"] for d in decisions)
        result.update(compare(got, ref.snapshot, skips_allowed=skipped))
    else:
        result.update({"identical": False, "duplicates": 0, "lost": 0, "diffs": [failure], "crashed": True})
    return result


def campaign_bench(name: str, *, kills: int, seed: int, scale: str, work: Path, rekill: float = 0.3,
                   controls: int = 0, keep: bool = False, log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """One bench's row: trials until ``kills`` SIGKILLs were delivered (at most 3 * kills trials)."""
    work.mkdir(parents=True, exist_ok=True)
    opened = open_bench(name, scale, work)
    if isinstance(opened, str):
        log(f"{name}: skipped: {opened}")
        return {"bench": name, "skipped": opened}
    bench = opened
    try:
        started = time.monotonic()
        ref = reference(bench, work, timeout=900)
        timeout = max(120.0, 10 * ref.seconds)
        log(f"{name}: uninterrupted run {ref.seconds:.1f} s, {ref.records} log records, {ref.intents} intents, "
            f"{ref.macro_intents} macro intents")
        row: dict[str, Any] = {"bench": name, "kills": 0, "trials": 0, "identical": 0, "duplicates": 0, "lost": 0,
                               "reported": 0, "crashed": 0, "landed": Counter(), "orphans": [], "failures": [],
                               "call_log_differs": 0, "log_duplicates": 0,
                               "reference_s": round(ref.seconds, 2), "reference_records": ref.records}
        for control in range(controls):
            trial = work / f"{name}-control{control}"
            trial.mkdir()
            outcome = run_once(bench, bench.command(trial), trial, "run", None, timeout)
            same = outcome.rc == 0 and compare(Snapshot.of(trial / "out", bench.store(trial) if bench.store else None),
                                               ref.snapshot, skips_allowed=False)["identical"]
            row.setdefault("controls_identical", 0)
            row["controls_identical"] += int(same)
            log(f"{name}: control run {control}: {'identical' if same else 'DIFFERENT'}")
            if same and not keep:
                shutil.rmtree(trial, ignore_errors=True)
        index = 0
        while row["kills"] < kills and index < 3 * kills:
            trial = work / f"{name}-trial{index:03d}"
            rng = random.Random(f"{seed}/{name}/{index}")
            result = run_trial(bench, ref, trial, rng, rekill, timeout)
            index += 1
            row["trials"] += 1
            row["kills"] += result["kills"]
            row["identical"] += int(result["identical"])
            row["duplicates"] += result["duplicates"]
            row["lost"] += result["lost"]
            row["reported"] += result["reported"]
            row["crashed"] += int(result.get("crashed", False))
            row["log_duplicates"] += result.get("log_duplicates", 0)
            row["call_log_differs"] += len(result.get("notes", []))
            for run in result["runs"]:
                if "landed" in run:
                    row["landed"][run["landed"]["at"]] += 1
                row["orphans"] += run.get("orphans", [])
            plans = "; ".join(f"{r['plan']} -> {r.get('landed', {}).get('at', 'not killed')}" for r in result["runs"]
                              if r["plan"])
            log(f"{name}: trial {index - 1}: {result['kills']} kill(s) [{plans}], "
                f"{'identical' if result['identical'] else 'DIFFERENT'}, {len(result['runs'])} run(s)"
                + (f", reported {result['reported']} {result['decisions']}" if result["reported"] else ""))
            if not result["identical"] or result["duplicates"] or result["lost"] or result.get("log_duplicates"):
                row["failures"].append({"bench": name, "seed": seed, "trial": index - 1, "dir": str(trial),
                                        "runs": result["runs"], "decisions": result["decisions"],
                                        "diffs": result["diffs"][:10]})
                log(f"{name}: trial {index - 1} FAILED: {result['diffs'][:3]} (kept in {trial})")
            elif not keep:
                shutil.rmtree(trial, ignore_errors=True)
        row["landed"] = dict(row["landed"])
        row["wall_s"] = round(time.monotonic() - started, 1)
        if not keep and not row["failures"]:
            shutil.rmtree(work / f"{name}-reference", ignore_errors=True)
        return row
    finally:
        bench.close()


# --------------------------------------------------------------------------- the campaign



def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| bench | kills | identical | duplicates | lost | reported | crashed | log dups | kills landed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['bench']} | skipped: {row['skipped']} | | | | | | | |")
            continue
        landed = ", ".join(f"{k} {v}" for k, v in sorted(row["landed"].items()))
        lines.append(f"| {row['bench']} | {row['kills']} | {row['identical']}/{row['trials']} | {row['duplicates']} | "
                     f"{row['lost']} | {row['reported']} | {row['crashed']} | {row['log_duplicates']} | {landed} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs to deliver per bench (20)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--benches", default=",".join(BENCHES), help=f"comma list of {', '.join(BENCHES)}")
    parser.add_argument("--scale", choices=SCALES, default="full", help="tasks per run: quick (tests) or full")
    parser.add_argument("--rekill", type=float, default=0.3, help="chance that a resume is killed too (0.3)")
    parser.add_argument("--controls", type=int, default=1, help="uninterrupted runs compared with the reference (1)")
    parser.add_argument("--work", type=Path, help="where trial folders go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep every trial folder, not only failed ones")
    parser.add_argument("--json", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    names = [b.strip() for b in args.benches.split(",") if b.strip()]
    unknown = [b for b in names if b not in BENCHES]
    if unknown:
        parser.error(f"unknown bench {', '.join(unknown)}: one of {', '.join(BENCHES)}")
    _become_subreaper()
    work = args.work or Path(tempfile.mkdtemp(prefix="kill-campaign-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    rows = []
    for name in names:
        rows.append(campaign_bench(name, kills=args.kills, seed=args.seed, scale=args.scale, work=work / name,
                                   rekill=args.rekill, controls=args.controls, keep=args.keep,
                                   log=lambda line: print(line, file=sys.stderr, flush=True)))
    failures = [f for row in rows for f in row.get("failures", [])]
    summary = {"seed": args.seed, "kills_per_bench": args.kills, "scale": args.scale, "rekill": args.rekill,
               "work": str(work), "wall_s": round(time.monotonic() - started, 1), "benches": rows,
               "ok": not failures}
    text = json.dumps(summary, default=str)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    print(table(rows))
    if not failures and args.work is None and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
