"""Running the in-sandbox runner on this host, confined to one directory tree.

With bubblewrap (``confinement="bwrap"``, the default) a call sees only its
tree (as ``/workspace``), a read-only ``/usr``, a private ``/tmp`` (a tmpfs of
at most ``Limits.disk_bytes``), ``/proc`` and ``/dev``; it runs in new user,
PID, network, IPC and UTS namespaces as an unprivileged user with no
capabilities, and every process it starts dies with it (the PID namespace ends
with the call).  The ``bwrap`` binary is resolved once, to an absolute path,
when a backend starts (calls run with a fixed ``PATH``), and tried once: when
it is missing or cannot make its namespaces, :func:`host_jail` raises a
:class:`SnapshotError` that says what is missing and how to install or enable it.

``confinement="none"`` is an explicit, documented opt-in: the call runs as a
plain process in its own session inside the tree, with the host's network,
processes and file system in reach (the file tools still refuse paths outside
the workspace, a shell command is not confined).  Backends mark every
observation made that way (``isolation="unconfined"``).  Nothing ever falls
back to it.

Cancelling :func:`run_confined` kills the call's whole process tree for real,
and returns only once it is dead.

Other programs confined on this host take the jail's words from here too: an
MCP server over a tree (:class:`agentspec.mcp.MCPToolkit`) runs under
:func:`bwrap_base`, with :data:`PATH` and :data:`SEAL`, exactly as a tool call
does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import anyio

from agentspec.errors import ConfigError, SnapshotError
from agentspec.sandbox.parent_guard import guarded
from agentspec.sandbox.program import RUNNER_FILE, SANDBOX_DIR, WORKSPACE

Confinement = Literal["bwrap", "none"]

SANDBOX_UID = "1000"
PATH = "/usr/local/bin:/usr/bin:/bin"
"""The ``PATH`` a jailed process starts with (bubblewrap clears the environment; :func:`bwrap_base` sets it)."""
SANDBOX_PYTHON = "/usr/bin/python3"
"""The interpreter a jailed call runs (the host's, seen through the read-only ``/usr``)."""

INSTALL_BWRAP = "apt-get install bubblewrap"
USERNS_HINT = (
    "unprivileged user namespaces look disabled: enable them with `sysctl -w kernel.unprivileged_userns_clone=1` "
    "(Debian) or `sysctl -w user.max_user_namespaces=15000` (on Ubuntu 24.04 also "
    "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`), or run where they are allowed"
)
_USERNS_ERRORS = ("namespace", "uid map", "setting up uid", "operation not permitted", "no space left")


def check_confinement(value: object) -> Confinement:
    """``value`` as a :data:`Confinement`; ConfigError for anything else (there is no "auto")."""
    if value not in get_args(Confinement):
        raise ConfigError(
            f"confinement must be 'bwrap' or 'none' (an explicit opt-out of the jail), not {value!r}"
        )
    return value  # type: ignore[return-value]


def find_bwrap() -> str | None:
    """The absolute path of ``bwrap`` on the caller's ``PATH`` (None when there is none)."""
    found = shutil.which("bwrap")
    return os.path.abspath(found) if found else None


def _python() -> str:
    for candidate in (SANDBOX_PYTHON, shutil.which("python3")):
        if candidate and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    raise SnapshotError("no python3 on this host to run sandboxed tools")


@dataclass(frozen=True)
class HostJail:
    """How calls are confined on this host, and the command line that runs the runner in a tree.

    ``bwrap`` is the absolute path of the bubblewrap binary (None when unconfined); ``tmp_bytes`` the
    size of the jail's private ``/tmp`` (None: no cap, only with ``Limits(disk_bytes=None)``).
    """

    kind: Confinement
    ops_file: Path
    bwrap: str | None = None
    tmp_bytes: int | None = None

    def argv(self, tree: Path) -> list[str]:
        if self.kind == "none":
            return [_python(), "-I", "-S", str(RUNNER_FILE)]
        assert self.bwrap is not None
        return guarded([
            *bwrap_base(self.bwrap, self.tmp_bytes),
            "--bind", str(tree), WORKSPACE, "--chdir", WORKSPACE,
            "--ro-bind", str(RUNNER_FILE), f"{SANDBOX_DIR}/runner.py",
            "--ro-bind", str(self.ops_file), f"{SANDBOX_DIR}/ops.py", *SEAL,
            SANDBOX_PYTHON, "-I", "-S", f"{SANDBOX_DIR}/runner.py",
        ])  # fmt: skip

    def paths(self, tree: Path) -> tuple[str, str]:
        """(workspace, ops module) as the runner sees them."""
        if self.kind == "none":
            return str(tree), str(self.ops_file)
        return WORKSPACE, f"{SANDBOX_DIR}/ops.py"

    @property
    def reaps(self) -> bool:
        """Whether the runner may kill leftovers with kill(-1): only inside a private PID namespace."""
        return self.kind == "bwrap"


SEAL = ["--remount-ro", "/"]
"""bubblewrap's last words before the command: the jail's root (bubblewrap's own tmpfs) read-only, so a call writes
only to its tree and its bounded /tmp, never to an unbounded root in memory (mounts made earlier keep their own
flags; device nodes still answer)."""


def bwrap_base(bwrap: str, tmp_bytes: int | None) -> list[str]:
    """bubblewrap's command line up to the tree and the command: new namespaces, an unprivileged user with no
    capabilities, a read-only ``/usr``, a private ``/tmp`` of ``tmp_bytes`` (None: no cap), ``/proc``, ``/dev`` and
    a clean environment.  ``bwrap`` is the binary's absolute path; callers add their binds, then :data:`SEAL`, then
    the command."""
    tmp = ["--size", str(tmp_bytes), "--tmpfs", "/tmp"] if tmp_bytes is not None else ["--tmpfs", "/tmp"]
    return [
        bwrap, "--unshare-all", "--unshare-user", "--uid", SANDBOX_UID, "--gid", SANDBOX_UID,
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
        "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
        "--ro-bind-try", "/etc/alternatives", "/etc/alternatives",
        "--proc", "/proc", "--dev", "/dev", *tmp,
        "--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
        "--setenv", "TMPDIR", "/tmp",
    ]  # fmt: skip


async def host_jail(confinement: Confinement, ops_file: Path, tmp_bytes: int | None) -> HostJail:
    """The jail for ``confinement``, checked once here: SnapshotError when bubblewrap is unusable.

    ``"none"`` is taken as asked (the caller opted out); ``"bwrap"`` resolves the binary on the
    caller's PATH to an absolute path and runs one trivial jailed command with it.
    """
    if check_confinement(confinement) == "none":
        return HostJail(kind="none", ops_file=ops_file)
    bwrap = find_bwrap()
    if bwrap is None:
        raise SnapshotError(
            f"bubblewrap (bwrap) is not installed, and sandboxed tools never run unconfined: {INSTALL_BWRAP}, or "
            "use a Docker sandbox (--backend docker; for an MCP server --mcp-sandbox docker); from Python, "
            "confinement='none' runs them unconfined, reported in every result"
        )
    if not os.access(SANDBOX_PYTHON, os.X_OK):
        raise SnapshotError(f"the bubblewrap jail runs {SANDBOX_PYTHON}, which is missing: apt-get install python3")
    try:
        result = await anyio.run_process([*bwrap_base(bwrap, tmp_bytes), *SEAL, SANDBOX_PYTHON, "-c", "pass"], check=False)
    except OSError as exc:
        raise SnapshotError(f"bubblewrap at {bwrap} cannot be run: {exc}") from exc
    if result.returncode != 0:
        said = result.stderr.decode(errors="replace").strip()[-300:]
        hint = USERNS_HINT if any(word in said.lower() for word in _USERNS_ERRORS) else f"check {bwrap}"
        raise SnapshotError(f"bubblewrap ({bwrap}) cannot make its sandbox here: {said or 'no message'}; {hint}")
    return HostJail(kind="bwrap", ops_file=ops_file, bwrap=bwrap, tmp_bytes=tmp_bytes)


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
