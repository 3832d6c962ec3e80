"""A jail that dies with agentspec's process, not with the thread that happened to start it.

bubblewrap's ``--die-with-parent`` is a parent-death signal, and Linux sends it when the *thread* that forked
bubblewrap ends.  trio starts every subprocess from a worker thread of its cache (``trio.to_thread``), and an idle
cached thread ends after about ten seconds: a jailed AppWorld worker or MCP server started that way was killed
(SIGKILL, an empty log) in the middle of a run, and so was any tool call that outlived the thread.

:func:`guarded` puts a small single-threaded Python process in front of bubblewrap.  It forks bubblewrap (whose
parent-death signal is then tied to the guard, which lives as long as bubblewrap does) and waits for whichever
ends first: bubblewrap, whose exit status it passes on, or agentspec's process, on whose end it kills bubblewrap
(and with it the jail).  It waits on pidfds, so it sleeps until one of the two ends (it polls once a second where
the kernel has no pidfds).  ``file_bytes`` also caps every file the jail writes (RLIMIT_FSIZE, inherited).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

GUARD = """\
import os, resource, select, signal, sys, time
limit, argv = int(sys.argv[1]), sys.argv[2:]
if limit >= 0:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
parent = os.getppid()
try:
    watched = os.pidfd_open(parent)
except (AttributeError, OSError):
    watched = None
if parent == 1:
    sys.exit(125)
pid = os.fork()
if pid == 0:
    os.execv(argv[0], argv)
signal.signal(signal.SIGTERM, lambda *_: (os.kill(pid, signal.SIGKILL), os._exit(143)))
try:
    child = os.pidfd_open(pid)
except (AttributeError, OSError):
    child = None
while True:
    if watched is not None and child is not None:
        ready = select.select([watched, child], [], [])[0]
    else:
        time.sleep(1.0)
        ready = [] if os.getppid() == parent else [watched]
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        code = os.waitstatus_to_exitcode(status)
        os._exit(code if code >= 0 else 128 - code)
    if watched in ready or os.getppid() != parent:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os._exit(137)
"""


def guarded(argv: Sequence[str], *, file_bytes: int | None = None) -> list[str]:
    """``argv`` (a bubblewrap command line) run behind the guard (module docstring)."""
    return [sys.executable, "-I", "-S", "-c", GUARD, str(-1 if file_bytes is None else file_bytes), *argv]
