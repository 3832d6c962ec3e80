"""The virtual clock: a run put on it (:func:`on_clock`), the clock code runs on (:func:`virtual_clock`), and the
guard that lets real work run in real time on it (see :mod:`agentspec.runtime.real_time`).

Kept apart from the backend wrapper so that anything running real work (a worker thread, a process) can hold the
guard without importing the backends it wraps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["RealTime", "on_clock", "virtual_clock"]


def on_clock(main: Callable[..., Awaitable[T]], *args: Any, virtual: bool) -> T:
    """``main(*args)`` run to its end on trio's virtual clock (a ``MockClock`` that jumps to the next deadline:
    simulated time, no waiting) when ``virtual``, else on the wall clock."""
    import anyio

    if virtual:
        from trio.testing import MockClock

        return anyio.run(main, *args, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})
    return anyio.run(main, *args)


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
