"""Real work under the virtual clock: a sandbox's calls take real time while simulated models take virtual time.

The virtual clock (trio's ``MockClock(autojump_threshold=0)``) jumps to the next timer as soon as every task
waits.  A task waiting for a worker thread or a process (a Docker container, a jailed tool) counts as waiting,
so the clock would jump over the call: the call would look free, and the sandbox's own deadline would fire at
once.  While any such work is in flight, :class:`RealTime` therefore stops the jumps and lets virtual time run
at the real rate; when the last piece of work ends, jumping resumes.  In-process environments never need it:
their calls run without awaiting anything.

Figures of such a run mean: model time as the latency model says, sandbox time as measured on this machine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypeVar

from agentspec.snapshot import SnapshotBackend
from agentspec.virtual_clock import RealTime, virtual_clock
from agentspec.wrapped_backend import BackendWrapper

__all__ = ["RealTime", "RealTimeBackend", "real_time_backend", "virtual_clock"]

T = TypeVar("T")


class RealTimeBackend(BackendWrapper):
    """A backend whose every call, snapshot, fork, commit and close runs in real time on a mock clock."""

    def __init__(self, inner: SnapshotBackend, real_time: RealTime) -> None:
        super().__init__(inner)
        self.real_time = real_time

    async def _forward(self, work: Awaitable[T]) -> T:
        with self.real_time.running():
            return await work


@asynccontextmanager
async def real_time_backend(opening: AbstractAsyncContextManager[SnapshotBackend]) -> AsyncIterator[SnapshotBackend]:
    """Open ``opening`` (a bench's ``open_backend(...)``) so that, on a mock clock, the backend works in real time.

    Starting and stopping the backend (a container, a jail) count as real work too.  On a real clock the
    backend is yielded as it is.
    """
    guard = RealTime.of_current_clock()
    if guard is None:
        async with opening as backend:
            yield backend
        return
    with guard.running():
        backend = await opening.__aenter__()
    try:
        yield RealTimeBackend(backend, guard)
    except BaseException as exc:
        with guard.running():
            if not await opening.__aexit__(type(exc), exc, exc.__traceback__):
                raise
    else:
        with guard.running():
            await opening.__aexit__(None, None, None)
