"""A server started for one process dies with that process, even when it is killed with SIGKILL.

:func:`agentspec.models.embedded.embedded_server` starts ``agentspec serve``
with ``AGENTSPEC_PARENT_PID`` set to its own pid and a pipe as the child's
stdin, whose write end only the parent holds.  The child calls
:func:`exit_with_parent` before loading anything, which arms two independent
guards:

- on Linux, a parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``):
  the kernel kills the child the moment its parent dies.  The parent may have
  died before the call, so the child then checks that its parent is still the
  pid it was given, and refuses to start otherwise;
- everywhere, a watchdog thread blocked on stdin: the pipe reaches end of
  file when every copy of its write end is closed, which is when the parent
  exits (or closes it on purpose).  The child then stops gracefully
  (SIGTERM), and exits anyway after ``grace_s``.

Without ``AGENTSPEC_PARENT_PID`` (``agentspec serve`` run by a person)
nothing is armed.  Caveat of the first guard: Linux sends the signal when the
*thread* that started the child ends, so start the child from a thread that
outlives it (an event loop's thread does).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from typing import BinaryIO

from agentspec.errors import ConfigError
from agentspec.models.embedded import PARENT_ENV

__all__ = ["PARENT_ENV", "exit_with_parent", "watch_pipe"]

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def exit_with_parent(environ: Mapping[str, str] = os.environ, *, grace_s: float = 10.0) -> bool:
    """Arm both guards if ``environ`` names a parent; return whether it did.

    Raises :class:`ConfigError` when the variable is not a pid, or when the
    parent it names is already gone (the child was orphaned while starting).
    """
    named = environ.get(PARENT_ENV)
    if not named:
        return False
    try:
        parent = int(named)
    except ValueError:
        raise ConfigError(f"{PARENT_ENV} must be a process id, not {named!r}") from None
    _set_parent_death_signal(signal.SIGKILL)
    # Checked after arming: a parent that dies from here on triggers the signal; one already gone does not.
    if os.getppid() != parent:
        raise ConfigError(f"the process that started this server (pid {parent}) is gone; not starting")
    watch_pipe(sys.stdin.buffer, grace_s=grace_s)
    return True


def _set_parent_death_signal(signum: int) -> None:
    """``prctl(PR_SET_PDEATHSIG, signum)`` where the C library has it (Linux); a no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise ConfigError(f"cannot set the parent-death signal: {os.strerror(errno)}")


def watch_pipe(pipe: BinaryIO, *, grace_s: float = 10.0) -> threading.Thread:
    """Stop this process when ``pipe`` reaches end of file: SIGTERM, then a hard exit after ``grace_s``."""
    # The thread reads the descriptor, not the buffered file: a daemon thread blocked inside a buffered read holds
    # its lock, and interpreter shutdown (the server stopping while its parent lives) then aborts on that lock.
    fd = pipe.fileno()

    def watch() -> None:
        try:
            while os.read(fd, 4096):
                pass  # the parent never writes; anything it did is ignored
        except OSError:
            pass  # a pipe that cannot be read any more is as good as closed
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(1)  # the graceful stop did not finish (or SIGTERM was ignored at that moment)

    thread = threading.Thread(target=watch, name="agentspec-parent-watchdog", daemon=True)
    thread.start()
    return thread
