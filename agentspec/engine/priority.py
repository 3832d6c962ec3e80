"""Request priority across the models one server runs: a background request gives way to the foreground.

The ``priority`` field is vLLM's: lower is served first, 0 is the default.
On a CPU the models of one server share the cores, so an agent's speculator
(priority 1, :data:`agentspec.roles.SPECULATOR_PRIORITY`) decoding beside
its authority makes every authority decision slower: measured on two cores,
0.94 s per decision, and sa at 0.82x of sequential.  With the gate, a
background request (priority above 0) runs only while no request of a better
priority is in progress on any of the server's models, and not until
:data:`SETTLE_S` after the last one ended (an agent's next turn follows its
tool's answer within that).  It waits before each unit of model work, so an
authority request that arrives takes the cores at the next step; a background
prefill runs in small chunks (:data:`agentspec.engine.scheduler.BACKGROUND_PREFILL_CHUNK`)
for the same reason.  Requests of priority 0 or better never wait here.

A background request can wait for as long as the foreground stays busy: that
is the point (its answer is only worth having if it costs the foreground
nothing); its client's timeout still bounds it.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio

__all__ = ["SETTLE_S", "PriorityGate", "background"]

SETTLE_S = 0.1
"""Seconds a background request still waits after the last better-priority request ended, and at its arrival
(the foreground request sent at the same moment may reach the server a little later)."""


def background(priority: int) -> bool:
    """Whether a request of this priority gives way to better ones (every priority above the default 0)."""
    return priority > 0


class PriorityGate:
    """Which priorities are in progress on a server's models, and the wait of a background request.

    One gate is shared by all the engines of a server (:func:`agentspec.serve.server.load_engines`); it lives on
    the server's event loop, like the engines' own scheduling.
    """

    def __init__(self, *, settle_s: float = SETTLE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.settle_s = settle_s
        self._clock = clock
        self._live: Counter[int] = Counter()
        self._ended: dict[int, float] = {}
        self._waiters: list[anyio.Event] = []

    @contextmanager
    def live(self, priority: int) -> Iterator[None]:
        """Count a request of ``priority`` as in progress for the duration of the block."""
        self._live[priority] += 1
        try:
            yield
        finally:
            self._live[priority] -= 1
            if not self._live[priority]:
                del self._live[priority]
            self._ended[priority] = self._clock()
            self._wake()

    def must_wait(self, priority: int) -> float:
        """Seconds a request of ``priority`` must still wait at least (0: it may run now; inf: until one ends)."""
        if not background(priority):
            return 0.0
        if any(other < priority for other in self._live):
            return float("inf")
        now = self._clock()
        ended = [at for other, at in self._ended.items() if other < priority]
        return max(0.0, max(ended, default=-float("inf")) + self.settle_s - now)

    async def arrive(self, priority: int) -> None:
        """A request of ``priority`` arrives: a background one gives a foreground request sent with it the time
        to arrive too (:data:`SETTLE_S`), then waits its :meth:`turn`."""
        if background(priority):
            await anyio.sleep(self.settle_s)
            await self.turn(priority)

    async def turn(self, priority: int) -> bool:
        """Wait until a request of ``priority`` may run its next unit; whether it had to wait."""
        waited = False
        while (wait := self.must_wait(priority)) > 0:
            waited = True
            event = anyio.Event()
            self._waiters.append(event)
            try:
                with anyio.move_on_after(None if math.isinf(wait) else wait):  # an ending request wakes it
                    await event.wait()
            finally:
                if event in self._waiters:
                    self._waiters.remove(event)
        return waited

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for event in waiters:
            event.set()
