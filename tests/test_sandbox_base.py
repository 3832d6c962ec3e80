"""The snapshot base: what :class:`LineageBackend` guarantees to any strategy, and that every backend uses it.

A strategy here is twenty lines over a dict state; the bookkeeping it gets for
free (tokens, lineage, stale commits, locks, discard and deadlines) is what the
real backends no longer write themselves.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import anyio
import pytest

from agentspec.errors import SnapshotError
from agentspec.sandbox.docker_backend import DockerBackend
from agentspec.sandbox.overlay import CopyTrees, OverlayBackend, OverlayTrees
from agentspec.sandbox.sqlite_backend import SqliteBackend
from agentspec.snapshot import InProcessBackend, LineageBackend, Snapshot, SnapshotBackend, StaleSnapshotError
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec

pytestmark = pytest.mark.anyio

PROTOCOL = ("execute", "snapshot", "fork", "commit", "discard")


def C(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


class DictBackend(LineageBackend[dict[str, str]]):
    """A toy strategy: the state is a dict; ``put`` writes, ``get`` reads, ``wait`` sleeps (and may time out)."""

    kind = "dict"

    def __init__(self, deadline_s: float | None = None) -> None:
        super().__init__()
        self.deadline_s = deadline_s
        self.dropped: list[dict[str, str]] = []

    async def start(self) -> None:
        self._set_live({})

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return []

    def effect(self, name: str) -> Effect:
        return Effect.READ_ONLY if name in ("get", "wait") else Effect.MUTATING

    def _deadline_s(self) -> float | None:
        return self.deadline_s

    async def _run(self, state: dict[str, str], step: Any, call: ToolCall, requestor: Requestor) -> Observation:
        if call.name == "put":
            state[call.arguments["key"]] = call.arguments["value"]
        if call.name == "wait":
            await anyio.sleep(call.arguments["seconds"])
        return Observation(call_id=call.id, name=call.name, content=repr(sorted(state.items())))

    async def _freeze(self, state: dict[str, str]) -> dict[str, str]:
        return dict(state)

    def _accepts(self, ref: Any) -> bool:
        return isinstance(ref, dict)

    async def _fork_state(self, ref: dict[str, str]) -> dict[str, str]:
        return dict(ref)

    async def _promote(self, state: dict[str, str], live: dict[str, str]) -> dict[str, str]:
        return state

    async def _drop(self, state: dict[str, str]) -> None:
        self.dropped.append(state)


async def test_a_strategy_gets_the_protocol_and_stale_checks() -> None:
    async with DictBackend() as backend:
        assert isinstance(backend, SnapshotBackend)
        snap = await backend.snapshot()
        a, b = await backend.fork(snap), await backend.fork(snap)
        await a.execute(C("put", key="x", value="a"))
        await b.execute(C("put", key="x", value="b"))
        assert a.token != snap.token and a.lineage == (snap.token,)
        await backend.commit(a)
        assert backend.live_token == a.token and backend._require_live() == {"x": "a"}
        with pytest.raises(StaleSnapshotError):
            await backend.commit(b)
        # A read on live leaves forks valid; a write makes them stale; a chain commits at its end.
        c = await backend.fork(await backend.snapshot())
        await backend.execute(C("get"))
        d = await backend.fork(await backend.snapshot(c))
        await d.execute(C("put", key="y", value="d"))
        await backend.commit(d)
        assert backend._require_live() == {"x": "a", "y": "d"}
        with pytest.raises(StaleSnapshotError):
            await backend.commit(c)
        await backend.execute(C("put", key="z", value="live"))
        e = await backend.fork(await backend.snapshot())
        await backend.execute(C("put", key="z", value="newer"))
        with pytest.raises(StaleSnapshotError):
            await backend.commit(e)


async def test_discarded_and_foreign_sandboxes_are_refused() -> None:
    async with DictBackend() as backend, DictBackend() as other:
        box = await backend.fork(await backend.snapshot())
        foreign = await other.fork(await other.snapshot())
        with pytest.raises(SnapshotError):
            await backend.commit(foreign)
        with pytest.raises(SnapshotError):
            await backend.snapshot(foreign)
        with pytest.raises(SnapshotError, match="does not belong to this dict backend"):
            await backend.fork(Snapshot(ref=["not", "a", "dict"], lineage=(backend.live_token,)))
        await backend.discard(box)
        assert backend.dropped == [{}]
        await backend.discard(box)  # twice is a no-op
        assert len(backend.dropped) == 1
        with pytest.raises(SnapshotError, match="discarded"):
            await box.execute(C("get"))
        with pytest.raises(SnapshotError):
            await backend.commit(box)


async def test_discard_stops_a_running_call_and_the_deadline_kills_one() -> None:
    async with DictBackend(deadline_s=0.5) as backend:
        box = await backend.fork(await backend.snapshot())
        results: list[Observation] = []

        async def run() -> None:
            results.append(await box.execute(C("wait", seconds=0.3)))  # within the deadline
            results.append(await box.execute(C("wait", seconds=30)))

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await anyio.sleep(0.4)
            await backend.discard(box)
        assert not results[0].error
        assert results[1].error and "discarded while the call ran" in results[1].content
        timed_out = await backend.execute(C("wait", seconds=30))
        assert timed_out.error and "ran past 0.5s" in timed_out.content
        assert time.monotonic() - started < 5


async def test_a_commit_waits_for_the_call_running_in_the_sandbox() -> None:
    async with DictBackend() as backend:
        box = await backend.fork(await backend.snapshot())
        order: list[str] = []

        async def slow_write() -> None:
            await box.execute(C("wait", seconds=0.3))
            order.append("call")

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_write)
            await anyio.sleep(0.05)
            await backend.commit(box)
            order.append("commit")
        assert order == ["call", "commit"]


async def test_close_discards_every_sandbox() -> None:
    backend = await DictBackend.open()
    box = await backend.fork(await backend.snapshot())
    await backend.close()
    assert box.discarded
    with pytest.raises(SnapshotError, match="not started"):
        await backend.execute(C("get"))


@pytest.mark.parametrize("backend", [InProcessBackend, SqliteBackend, OverlayBackend, DockerBackend])
def test_every_backend_is_a_strategy_of_the_base(backend: type) -> None:
    """The bookkeeping lives once: no backend writes the protocol's methods itself."""
    assert issubclass(backend, LineageBackend)
    own = {name for name in PROTOCOL if name in vars(backend)}
    assert own == set(), f"{backend.__name__} re-implements {own}"
    if backend is not InProcessBackend:  # snapshot.py holds the base itself
        source = inspect.getsource(inspect.getmodule(backend))  # type: ignore[arg-type]
        assert "check_descends" not in source and "new_token" not in source and "_live_lock" not in source


def test_overlay_and_copy_are_two_strategies() -> None:
    shared = set(vars(OverlayTrees)) & set(vars(CopyTrees)) - {"__module__", "__doc__", "name", "__annotations__"}
    assert {"live", "freeze", "fork", "promote"} <= shared
    assert "self.mode ==" not in inspect.getsource(OverlayBackend)

