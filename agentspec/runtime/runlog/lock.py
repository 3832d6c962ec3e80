"""One run at a time per output folder: an exclusive lock on ``<out>/.agentspec.lock`` for the whole run.

A second run into the same folder would interleave its records with the first's; it is refused with the holder.
"""

from __future__ import annotations

import fcntl
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentspec.errors import ConfigError

LOCK_NAME = ".agentspec.lock"

_held: dict[tuple[Path, int], int] = {}  # (folder, thread) -> depth: the same run may take its folder again


def _open_lock(path: Path, folder: str | os.PathLike[str]) -> int:
    """The lock file, opened for writing the holder into it: only a regular file of ours with one link, never
    through a symlink, so a folder someone else prepared cannot make the run overwrite another file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise ConfigError(f"--out {folder}: cannot open its lock file {path.name} ({exc.strerror}); remove it if it "
                          "is not a plain file") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_uid != os.geteuid():
        os.close(fd)
        raise ConfigError(f"--out {folder}: its lock file {path.name} is not a plain file of yours with one link; "
                          "remove it")
    return fd


@contextmanager
def locked_out(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold ``folder`` (a run's ``--out``, created) for the block: an exclusive ``flock`` on its lock file.

    A second run into the folder, in another process or thread, gets a :class:`ConfigError` naming the folder and
    the holder at once, instead of interleaving its records with the first.  Taking it again inside the block (the
    command line around :func:`agentspec.pipeline.run`) is free.  The kernel drops the lock when the holder dies.
    """
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    key = (path.resolve(), threading.get_ident())
    if key in _held:
        _held[key] += 1
        try:
            yield path
        finally:
            _held[key] -= 1
        return
    fd = _open_lock(key[0] / LOCK_NAME, folder)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "a run that has not said who it is"
        os.close(fd)
        raise ConfigError(f"--out {folder} is in use by another run ({holder}): wait for it to finish, or give "
                          "another --out") from None
    try:
        os.ftruncate(fd, 0)
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {since}\n".encode(), 0)
        _held[key] = 1
        try:
            yield path
        finally:
            del _held[key]
    finally:
        os.close(fd)  # releases the lock
