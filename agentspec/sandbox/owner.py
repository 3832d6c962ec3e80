"""Who owns a sandbox resource, so a later process can tell leftovers of a dead one from live work.

Every container, image and scratch directory a backend makes is tagged with
``host:pid:start`` of the process that made it (``start`` is the process start
time from ``/proc``, so a recycled PID does not look alive).  A sweep removes
what belongs to this host and to a process that no longer runs.
"""

from __future__ import annotations

import os
import socket
from functools import cache


def start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, as text), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return None
    # Field 22 (starttime) counted after the parenthesised command name, which may contain spaces.
    return stat.rsplit(")", 1)[1].split()[19]


@cache
def owner_tag() -> str:
    """``host:pid:start`` of this process."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{start_time(pid)}"


def owner_dead(tag: str) -> bool:
    """True only when ``tag`` names a process on this host that no longer runs."""
    host, _, rest = tag.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's (or a foreign) resource: never ours to sweep
    return start_time(int(pid)) != start
