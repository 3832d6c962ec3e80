"""Running the in-sandbox runner on this host, confined to one directory tree.

With bubblewrap (``bwrap``) a call sees only its tree (as ``/workspace``), a
read-only ``/usr``, a private ``/tmp``, ``/proc`` and ``/dev``; it runs in new
user, PID, network, IPC and UTS namespaces as an unprivileged user with no
capabilities, and every process it starts dies with it (the PID namespace ends
with the call).  Without bwrap (``none``) the call runs as a plain process in
its own session inside the tree: the file tools still refuse paths outside the
workspace, but a shell command is not confined; say so where that matters.

Cancelling :func:`run_confined` kills the call's whole process tree for real,
and returns only once it is dead.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio

from agentspec.errors import SnapshotError
from agentspec.sandbox.program import RUNNER_FILE, SANDBOX_DIR, WORKSPACE

Confinement = Literal["bwrap", "none"]

SANDBOX_UID = "1000"
PATH = "/usr/local/bin:/usr/bin:/bin"


def _python() -> str:
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SnapshotError("no python3 on this host to run sandboxed tools")


@dataclass(frozen=True)
class HostJail:
    """How calls are confined on this host, and the command line that runs the runner in a tree."""

    kind: Confinement
    ops_file: Path

    def argv(self, tree: Path) -> list[str]:
        if self.kind == "none":
            return [_python(), "-I", "-S", str(RUNNER_FILE)]
        return [
            *_bwrap_base(),
            "--bind", str(tree), WORKSPACE, "--chdir", WORKSPACE,
            "--ro-bind", str(RUNNER_FILE), f"{SANDBOX_DIR}/runner.py",
            "--ro-bind", str(self.ops_file), f"{SANDBOX_DIR}/ops.py",
            "/usr/bin/python3", "-I", "-S", f"{SANDBOX_DIR}/runner.py",
        ]  # fmt: skip

    def paths(self, tree: Path) -> tuple[str, str]:
        """(workspace, ops module) as the runner sees them."""
        if self.kind == "none":
            return str(tree), str(self.ops_file)
        return WORKSPACE, f"{SANDBOX_DIR}/ops.py"

    @property
    def reaps(self) -> bool:
        """Whether the runner may kill leftovers with kill(-1): only inside a private PID namespace."""
        return self.kind == "bwrap"


def _bwrap_base() -> list[str]:
    return [
        "bwrap", "--unshare-all", "--unshare-user", "--uid", SANDBOX_UID, "--gid", SANDBOX_UID,
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
        "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
        "--ro-bind-try", "/etc/alternatives", "/etc/alternatives",
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
        "--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
        "--setenv", "TMPDIR", "/tmp",
    ]  # fmt: skip


async def detect_confinement(wanted: Confinement | Literal["auto"]) -> Confinement:
    """``bwrap`` when it works here (tried once), else ``none``; an explicit choice is checked."""
    if wanted == "none":
        return "none"
    works = False
    if shutil.which("bwrap") and os.path.exists("/usr/bin/python3"):
        result = await anyio.run_process([*_bwrap_base(), "/usr/bin/python3", "-c", "pass"], check=False)
        works = result.returncode == 0
    if wanted == "bwrap" and not works:
        raise SnapshotError("bubblewrap (bwrap) is not usable on this host")
    return "bwrap" if works else "none"


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                children.setdefault(stat[1], []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_tree(pid: int) -> set[int]:
    """SIGKILL a process and all its descendants (scanned twice, to catch forks in flight)."""
    victims: set[int] = set()
    for _ in range(2):
        for victim in [pid, *_descendants(pid)]:
            victims.add(victim)
            try:
                os.kill(victim, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    return victims


async def _wait_dead(pids: set[int], timeout: float = 5.0) -> None:
    """Until every pid is gone or a zombie.  Killing a PID namespace's init tears the namespace down
    asynchronously; once that init is a zombie, everything that ran inside is dead."""
    with anyio.move_on_after(timeout):
        while any((stat := _stat(pid)) is not None and stat[0] not in "ZX" for pid in pids):
            await anyio.sleep(0.01)


async def run_confined(argv: list[str], payload: bytes, cwd: Path) -> tuple[int, bytes, bytes]:
    """Run ``argv`` with ``payload`` on stdin; (exit code, stdout, stderr).  Cancellation kills it."""
    env = {"PATH": PATH, "HOME": str(cwd), "LANG": "C.UTF-8"}
    process = await anyio.open_process(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
        start_new_session=True,
    )  # fmt: skip
    chunks: dict[str, list[bytes]] = {"out": [], "err": []}

    async def drain(stream: object, key: str) -> None:
        async for chunk in stream:  # type: ignore[attr-defined]
            chunks[key].append(chunk)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, process.stdout, "out")
            tg.start_soon(drain, process.stderr, "err")
            assert process.stdin is not None
            try:
                await process.stdin.send(payload)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass  # the runner died early; its exit code tells
            await process.stdin.aclose()
        code = await process.wait()
    except BaseException:
        # Cancelled or failed: the call's processes must not outlive it.  The whole tree, not just the
        # process group: an unconfined command runs in a session of its own (ops.py's _run).
        victims = kill_tree(process.pid)
        with anyio.CancelScope(shield=True):
            await process.aclose()
            await _wait_dead(victims)
        raise
    # No killpg after a normal exit: the PID may already be reused.  Leftovers die with the
    # PID namespace (bwrap) or were killed with their group by the op (ops.py's _run).
    await process.aclose()
    return code, b"".join(chunks["out"]), b"".join(chunks["err"])
