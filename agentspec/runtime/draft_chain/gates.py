"""The gates that pause the speculation worker, each set by the part of the loop that needs the worker to wait:
``live_gate`` while a live call runs, ``turn`` while a draft-first authority decides, ``hold`` while the governor
times a decision without speculation; ``asking`` tells that a speculator request is in flight.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from agentspec.runtime.draft import Draft


class Gates:
    """The worker's gates: each open while None or set, closed while an unset event."""

    def __init__(self) -> None:
        self.live_gate: anyio.Event | None = None
        """Unset while a live call runs: the worker restarts from the state after it."""
        self.turn: anyio.Event | None = None
        """Draft-first: unset from the moment the speculator's guess is in until the authority has decided on it
        (the speculator waits: the authority has the cores)."""
        self.hold: anyio.Event | None = None
        """Unset while the governor wants this authority decision without speculation (a baseline sample)."""
        self.asking: anyio.Event | None = None
        """Unset while the speculator answers a request."""

    async def passed(self, epoch: int, current: Callable[[], int], last: Draft | None) -> bool:
        """Wait out whatever pauses the worker (``last``: the chain's last draft, whose tool it waits for too);
        False when the chain was reset meanwhile (``current()`` moved past ``epoch``: restart from there)."""
        if self.live_gate is not None:
            await self.live_gate.wait()
            return False  # the epoch moved on: let the worker loop restart from the new state
        if last is not None and not last.done.is_set():
            await last.done.wait()
        if self.turn is not None:
            await self.turn.wait()  # draft-first: the authority is deciding on the last guess
            if epoch != current():
                return False
        if self.hold is not None:
            await self.hold.wait()  # the governor times this authority decision without speculation
            if epoch != current():
                return False
        return True
