"""A pids cgroup per call: how the overlay and copy backends cap a call's processes when run as root.

RLIMIT_NPROC does not bind processes whose user is root outside the jail's user
namespace (the kernel exempts the initial root user), so a root host puts each
jailed call into a cgroup of its own with ``pids.max`` set: cgroup v1's
``pids`` hierarchy or cgroup v2 with the ``pids`` controller.  The call is
moved in before bubblewrap starts (a ``/bin/sh`` that writes its own pid and
then execs), so everything the call starts is counted.

Cgroups are named after the owning process (``agentspec-PID-START-ID``) like
the scratch roots, so a later start removes what a killed process left.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

from agentspec.sandbox.owner import owner_dead, owner_tag

PREFIX = "agentspec-"
V1_ROOT = Path("/sys/fs/cgroup/pids")
V2_ROOT = Path("/sys/fs/cgroup")
ENTER = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
"""``sh -c ENTER CGROUP ARGV...``: join the cgroup, then become the call."""


def host_uid() -> int:
    """The uid this process has one user namespace up (what the kernel charges processes to).

    Inside ``unshare -Ur`` the effective uid is 0 while the kernel still sees the caller's uid.
    """
    euid = os.geteuid()
    try:
        with open("/proc/self/uid_map", encoding="ascii") as fh:
            for line in fh:
                inside, outside, count = (int(field) for field in line.split())
                if inside <= euid < inside + count:
                    return outside + euid - inside
    except (OSError, ValueError):
        pass
    return euid


def rlimit_nproc_binds() -> bool:
    """Whether RLIMIT_NPROC binds our jailed calls: not for root's processes, which the kernel exempts."""
    return host_uid() != 0


def pids_root() -> Path | None:
    """The writable cgroup directory that offers ``pids.max`` to its children, or None."""
    if (V1_ROOT / "cgroup.procs").is_file() and os.access(V1_ROOT, os.W_OK):
        return V1_ROOT
    try:
        controllers = (V2_ROOT / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None
    return V2_ROOT if "pids" in controllers and os.access(V2_ROOT, os.W_OK) else None


def _kill_members(group: Path) -> None:
    try:
        pids = (group / "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError):
            pass


def remove_group(group: Path, wait_s: float = 2.0) -> bool:
    """Kill what is left in ``group`` (and its children) and remove it; False if it stays busy."""
    for child in [p for p in group.iterdir() if p.is_dir()] if group.is_dir() else []:
        remove_group(child, wait_s)
    deadline = time.monotonic() + wait_s
    while True:
        _kill_members(group)
        try:
            group.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)  # a dying PID namespace takes a moment to empty the group


class PidsCgroups:
    """The cgroups of one backend: a parent, and one child per call with ``pids.max`` set.

    Blocking methods (small cgroupfs writes); the constructor raises OSError where cgroups are refused.
    """

    def __init__(self, root: Path, backend_id: str) -> None:
        self.root = root
        host_pid_start = owner_tag().split(":", 1)[1].replace(":", "-")
        self.dir = root / f"{PREFIX}{host_pid_start}-{backend_id}"
        self._ids = itertools.count(1)
        self.dir.mkdir()
        try:
            if root != V1_ROOT:  # cgroup v2: children get pids.max only when the parent delegates it
                (self.dir / "cgroup.subtree_control").write_text("+pids")
            probe = self.new_call(1)
            remove_group(probe)
        except OSError:
            remove_group(self.dir)
            raise

    def new_call(self, pids: int) -> Path:
        group = self.dir / f"call-{next(self._ids)}"
        group.mkdir()
        try:
            (group / "pids.max").write_text(str(pids))
        except OSError:
            group.rmdir()
            raise
        return group

    def close(self) -> None:
        remove_group(self.dir)


def sweep_cgroups(root: Path) -> list[Path]:
    """Remove the call cgroups of this host's dead processes (their leftover processes are killed)."""
    swept = []
    host = owner_tag().split(":")[0]
    for entry in root.glob(f"{PREFIX}*"):
        parts = entry.name[len(PREFIX) :].split("-")
        if len(parts) >= 3 and owner_dead(f"{host}:{parts[0]}:{parts[1]}") and remove_group(entry, 0.5):
            swept.append(entry)
    return swept
