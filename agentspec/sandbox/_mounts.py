"""Thin wrappers over mount(2) and umount2(2), and the mount table (Linux only).

Calling libc directly costs microseconds where spawning ``mount`` costs
milliseconds; overlay forks mount and unmount on their hot path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

MS_RDONLY = 1
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str, target: Path, fstype: str, flags: int = 0, data: str | None = None) -> None:
    """mount(2); raises OSError (EPERM when this process may not mount)."""
    _check(
        _libc.mount(source.encode(), str(target).encode(), fstype.encode(), flags, data.encode() if data else None),
        f"mount {fstype} on {target}",
    )


def make_private(target: Path) -> None:
    """Stop mount events under ``target`` from propagating to (or from) the rest of the system."""
    _check(_libc.mount(b"none", str(target).encode(), None, MS_PRIVATE | MS_REC, None), f"make {target} private")


def umount(target: Path, detach: bool = False) -> None:
    _check(_libc.umount2(str(target).encode(), MNT_DETACH if detach else 0), f"umount {target}")


def _unescape(field: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as octal.
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="replace")


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below ``root``, deepest first (the order to unmount them in)."""
    prefix = str(root).rstrip("/")
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            point = _unescape(line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def unmount_all(root: Path) -> None:
    """Lazily unmount everything at or below ``root`` (best effort)."""
    for point in mounts_under(root):
        try:
            umount(point, detach=True)
        except OSError:
            pass


def in_initial_user_namespace() -> bool:
    """False inside ``unshare -U`` and similar, where overlayfs needs its ``userxattr`` option."""
    try:
        with open("/proc/self/uid_map", encoding="ascii") as fh:
            return fh.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False
