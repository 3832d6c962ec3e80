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

from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncContextManager, TypeVar

from agentspec.snapshot import SnapshotBackend
from agentspec.wrapped_backend import BackendWrapper

__all__ = ["RealTime", "RealTimeBackend", "real_time_backend", "virtual_clock"]

T = TypeVar("T")


def virtual_clock() -> Any | None:
    """The trio mock clock this code runs on (a run on the virtual clock), or None (a real clock, or asyncio)."""
    try:
        import trio
        from trio.testing import MockClock
    except ImportError:
        return None
    try:
        clock = trio.lowlevel.current_clock()
    except RuntimeError:  # not running under trio (asyncio backend): the wall clock
        return None
    return clock if isinstance(clock, MockClock) else None


class RealTime:
    """Counts the real work in flight on a mock clock; the clock runs in real time while there is some."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.depth = 0
        self._saved: tuple[float, float] = (0.0, 0.0)

    @contextmanager
    def running(self) -> Iterator[None]:
        if self.depth == 0:
            self._saved = (self.clock.rate, self.clock.autojump_threshold)
            self.clock.autojump_threshold = float("inf")
            self.clock.rate = 1.0
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if self.depth == 0:
                rate, threshold = self._saved
                self.clock.rate = rate
                self.clock.autojump_threshold = threshold

    @classmethod
    def of_current_clock(cls) -> RealTime | None:
        """The guard for the running trio mock clock, shared by the whole run; None on a real clock."""
        clock = virtual_clock()
        if clock is None:
            return None
        guard = getattr(clock, "_agentspec_real_time", None)
        if guard is None:
            guard = cls(clock)
            clock._agentspec_real_time = guard  # one counter per clock: episodes run concurrently
        return guard


class RealTimeBackend(BackendWrapper):
    """A backend whose every call, snapshot, fork, commit and close runs in real time on a mock clock."""

    def __init__(self, inner: SnapshotBackend, real_time: RealTime) -> None:
        super().__init__(inner)
        self.real_time = real_time

    async def _forward(self, work: Awaitable[T]) -> T:
        with self.real_time.running():
            return await work


@asynccontextmanager
async def real_time_backend(opening: AsyncContextManager[SnapshotBackend]) -> AsyncIterator[SnapshotBackend]:
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
