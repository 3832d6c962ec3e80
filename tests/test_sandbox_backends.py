"""The snapshot protocol over real sandboxes: overlay, copy, Docker (promotion) and Docker (diff commits).

Every test runs against each backend through the workspace tools, so what is
checked is what an agent sees: isolation of files and processes, no network,
stale commits refused, chains, and calls that really die when cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sandbox_support import PROCESS_LIST, C, host_processes, read_tree, require_bwrap

from agentspec.sandbox.docker_backend import DockerBackend
from agentspec.sandbox.overlay import OverlayBackend
from agentspec.sandbox.program import Limits
from agentspec.snapshot import SnapshotBackend, StaleSnapshotError
from envs.workspace.environment import workspace_program

HOST_KINDS = ["overlay", "copy"]
DOCKER_KINDS = [pytest.param("docker", marks=pytest.mark.docker), pytest.param("docker-diff", marks=pytest.mark.docker)]
BASE = {"a.txt": "base", "d/x.txt": "basex"}

Opener = Callable[..., Any]


def _source(folder: Path) -> Path:
    for path, text in BASE.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    return folder


def _opener(request: pytest.FixtureRequest, source: Path) -> Opener:
    kind = request.param
    if kind.startswith("docker"):
        client = request.getfixturevalue("docker_client")
        image = request.getfixturevalue("dev_image")
        mode = "diff" if kind == "docker-diff" else "promote"
        return lambda **kw: DockerBackend(workspace_program(), source, image=image, client=client, commit_mode=mode, **kw)
    require_bwrap()
    return lambda **kw: OverlayBackend(workspace_program(), source, mode=kind, **kw)


@pytest.fixture(params=HOST_KINDS + DOCKER_KINDS)
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Makes an unstarted backend of each kind over a small source tree (use it with ``async with``)."""
    return _opener(request, _source(tmp_path))


@pytest.mark.anyio
async def test_backend_satisfies_the_protocol(opener: Opener) -> None:
    async with opener() as backend:
        assert isinstance(backend, SnapshotBackend)
        assert {spec.name for spec in backend.tool_specs()} >= {"read_file", "write_file", "run_shell"}
        assert await read_tree(backend) == BASE


@pytest.mark.anyio
async def test_forks_are_isolated_from_live_and_from_each_other(opener: Opener) -> None:
    async with opener() as backend:
        snap = await backend.snapshot()
        a, b = await backend.fork(snap), await backend.fork(snap)
        await a.execute(C("write_file", path="new.txt", content="fresh"))
        await a.execute(C("write_file", path="a.txt", content="changed"))
        await a.execute(C("delete_path", path="d"))
        await a.execute(C("run_shell", command="mkdir -p deep/er && printf hi > deep/er/f.txt"))
        assert await read_tree(a) == {"a.txt": "changed", "new.txt": "fresh", "deep/er/f.txt": "hi"}
        assert await read_tree(b) == BASE
        assert await read_tree(backend) == BASE
        await b.execute(C("write_file", path="b.txt", content="only b"))
        assert "b.txt" not in await read_tree(a)
        await backend.discard(a)
        await backend.discard(b)
        assert await read_tree(backend) == BASE


@pytest.mark.anyio
async def test_processes_never_outlive_a_call(opener: Opener) -> None:
    async with opener() as backend:
        snap = await backend.snapshot()
        a, b = await backend.fork(snap), await backend.fork(snap)
        started = await a.execute(C("run_shell", command="sleep 301 & nohup sleep 302 >/dev/null 2>&1 & echo started"))
        assert "started" in started.content
        for target in (a, b, backend):
            listing = await target.execute(C("run_python", code=PROCESS_LIST))
            assert "sleep 30" not in listing.content, listing.content
        assert host_processes("sleep 301") == [] and host_processes("sleep 302") == []


@pytest.mark.anyio
async def test_no_network_inside(opener: Opener) -> None:
    code = (
        "import socket\n"
        "print([name for _, name in socket.if_nameindex()])\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print('refused', exc.errno)\n"
    )
    async with opener() as backend:
        box = await backend.fork(await backend.snapshot())
        for target in (box, backend):
            out = (await target.execute(C("run_python", code=code))).content
            assert "['lo']" in out and "refused" in out, out


@pytest.mark.anyio
async def test_stale_commit_is_refused(opener: Opener) -> None:
    async with opener() as backend:
        snap = await backend.snapshot()
        a, b = await backend.fork(snap), await backend.fork(snap)
        await a.execute(C("write_file", path="a.txt", content="from a"))
        await b.execute(C("write_file", path="a.txt", content="from b"))
        await backend.commit(a)
        with pytest.raises(StaleSnapshotError):
            await backend.commit(b)
        assert (await read_tree(backend))["a.txt"] == "from a"
        # A write on live makes every older fork stale; a read does not.
        c = await backend.fork(await backend.snapshot())
        await backend.execute(C("read_file", path="a.txt"))
        d = await backend.fork(await backend.snapshot())
        await backend.execute(C("write_file", path="live.txt", content="x"))
        for box in (c, d):
            with pytest.raises(StaleSnapshotError):
                await backend.commit(box)


@pytest.mark.anyio
async def test_committing_the_end_of_a_chain_commits_the_chain(opener: Opener) -> None:
    async with opener() as backend:
        a = await backend.fork(await backend.snapshot())
        await a.execute(C("write_file", path="one.txt", content="1"))
        await a.execute(C("delete_path", path="a.txt"))
        c = await backend.fork(await backend.snapshot(a))
        await c.execute(C("write_file", path="d/two.txt", content="2"))
        await backend.commit(c)
        assert await read_tree(backend) == {"one.txt": "1", "d/x.txt": "basex", "d/two.txt": "2"}
        with pytest.raises(StaleSnapshotError):
            await backend.commit(a)


@pytest.mark.anyio
async def test_cancelling_a_call_kills_it(opener: Opener) -> None:
    async with opener() as backend:
        box = await backend.fork(await backend.snapshot())
        started = time.monotonic()
        with anyio.move_on_after(1.5):
            await box.execute(C("run_shell", command="printf 1 > before.txt; sleep 31; printf 2 > after.txt"))
        assert time.monotonic() - started < 8
        assert host_processes("sleep 31") == []
        await anyio.sleep(0.5)
        tree = await read_tree(box)
        assert tree.get("before.txt") == "1" and "after.txt" not in tree
        # The sandbox stays usable after the kill.
        assert (await box.execute(C("run_shell", command="echo alive"))).content.strip() == "alive"


@pytest.mark.anyio
async def test_discard_kills_a_running_call(opener: Opener) -> None:
    async with opener() as backend:
        box = await backend.fork(await backend.snapshot())
        results = []

        async def run() -> None:
            results.append(await box.execute(C("run_shell", command="sleep 32")))

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await anyio.sleep(1.0)
            await backend.discard(box)
        assert time.monotonic() - started < 10
        assert results and results[0].error and "discarded" in results[0].content
        assert host_processes("sleep 32") == []


@pytest.mark.anyio
async def test_a_call_past_the_limit_is_killed(opener: Opener) -> None:
    async with opener(limits=Limits(call_timeout_s=1.5)) as backend:
        started = time.monotonic()
        obs = await backend.execute(C("run_shell", command="sleep 33"))
        assert obs.error and "ran past" in obs.content
        assert time.monotonic() - started < 8
        assert host_processes("sleep 33") == []
        assert (await backend.execute(C("run_shell", command="echo ok"))).content.strip() == "ok"


@pytest.mark.anyio
async def test_tool_errors_are_observations(opener: Opener) -> None:
    async with opener() as backend:
        assert (await backend.execute(C("read_file", path="missing.txt"))).error
        assert "outside the workspace" in (await backend.execute(C("read_file", path="../../etc/passwd"))).content
        assert "not found" in (await backend.execute(C("no_such_tool"))).content
        assert (await backend.execute(C("write_file", path="x.txt"))).error  # missing argument
        out = await backend.execute(C("run_shell", command="echo out; echo err >&2; exit 3"))
        assert not out.error and "out" in out.content and "err" in out.content and "[exit code 3]" in out.content


# ---------------------------------------------------------------------- property-based

PATHS = ["a.txt", "b.txt", "d/x.txt", "d/y.txt", "d/e/z.txt"]
DIRS = ["d", "d/e"]
TEXT = st.text(alphabet="abcxyz019", min_size=1, max_size=10)
OPS = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(PATHS), TEXT),
    st.tuples(st.just("append"), st.sampled_from(PATHS), TEXT),
    st.tuples(st.just("delete"), st.sampled_from(PATHS + DIRS), st.just("")),
    st.tuples(st.just("shell"), st.sampled_from(PATHS), TEXT),
)
PLANS = st.fixed_dictionaries(
    {
        "a": st.lists(OPS, max_size=6),
        "c": st.lists(OPS, max_size=4),
        "chain": st.booleans(),
        "action": st.sampled_from(["commit_a", "commit_c", "discard"]),
    }
)


def _call(op: tuple[str, str, str]) -> Any:
    kind, path, text = op
    if kind == "write":
        return C("write_file", path=path, content=text)
    if kind == "append":
        return C("write_file", path=path, content=text, append=True)
    if kind == "delete":
        return C("delete_path", path=path)
    return C("run_shell", command=f"mkdir -p $(dirname {path}) && printf %s {text} > {path}")


def _apply(model: dict[str, str], op: tuple[str, str, str]) -> None:
    kind, path, text = op
    if kind in ("write", "shell"):
        model[path] = text
    elif kind == "append":
        model[path] = model.get(path, "") + text
    else:
        for key in [k for k in model if k == path or k.startswith(path + "/")]:
            del model[key]


async def _example(backend: Any, live: dict[str, str], plan: dict[str, Any]) -> dict[str, str]:
    """Run one plan: fork a and b, maybe chain c off a, then commit or discard; returns the new live model."""
    snap = await backend.snapshot()
    a, b = await backend.fork(snap), await backend.fork(snap)
    model_a = dict(live)
    for op in plan["a"]:
        await a.execute(_call(op))
        _apply(model_a, op)
    assert await read_tree(a) == model_a
    assert await read_tree(b) == live
    assert await read_tree(backend) == live
    c, model_c = None, dict(model_a)
    if plan["chain"]:
        c = await backend.fork(await backend.snapshot(a))
        for op in plan["c"]:
            await c.execute(_call(op))
            _apply(model_c, op)
        assert await read_tree(c) == model_c
        assert await read_tree(a) == model_a
    if plan["action"] == "commit_c" and c is not None:
        await backend.commit(c)
        live, changed = model_c, bool(plan["a"] or plan["c"])
    elif plan["action"] == "commit_a":
        await backend.commit(a)
        live, changed = model_a, bool(plan["a"])
    else:
        changed = False
    if changed:  # b still descends from the old live state: it must be refused
        with pytest.raises(StaleSnapshotError):
            await backend.commit(b)
    for box in (a, b, c):
        if box is not None:
            await backend.discard(box)
    assert await read_tree(backend) == live
    return live


class _Runner:
    """One backend kept open across hypothesis examples, driven through a blocking portal."""

    def __init__(self, portal: Any, backend: Any) -> None:
        self.portal, self.backend, self.live = portal, backend, dict(BASE)

    def run(self, plan: dict[str, Any]) -> None:
        self.live = self.portal.call(_example, self.backend, self.live, plan)


@pytest.fixture
def runner(opener: Opener) -> Any:
    with anyio.from_thread.start_blocking_portal("asyncio") as portal:
        backend = opener(max_layers=3)  # shallow stacks: squashes (overlay) and flattens (Docker) get exercised
        portal.call(backend.start)
        try:
            yield _Runner(portal, backend)
        finally:
            portal.call(backend.close)


HYPOTHESIS = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}


@pytest.mark.parametrize("opener", HOST_KINDS, indirect=True)
@settings(max_examples=20, **HYPOTHESIS)
@given(plan=PLANS)
def test_commit_and_discard_match_a_model_host(runner: _Runner, plan: dict[str, Any]) -> None:
    runner.run(plan)


@pytest.mark.parametrize("opener", DOCKER_KINDS, indirect=True)
@settings(max_examples=6, **HYPOTHESIS)
@given(plan=PLANS)
def test_commit_and_discard_match_a_model_docker(runner: _Runner, plan: dict[str, Any]) -> None:
    runner.run(plan)


@pytest.mark.parametrize("opener", [*HOST_KINDS, *DOCKER_KINDS], indirect=True)
def test_a_directory_deleted_and_made_again_commits_without_its_old_files(runner: _Runner) -> None:
    """Deleted in one fork, made again in a fork of it: the diff says only "d changed"; its old files must go anyway."""
    runner.run({"a": [("delete", "d", "")], "c": [("write", "d/y.txt", "new")], "chain": True, "action": "commit_c"})
    assert "d/x.txt" not in runner.live and runner.live["d/y.txt"] == "new"
    runner.run({"a": [("delete", "d", ""), ("write", "d/z.txt", "z")], "c": [], "chain": False, "action": "commit_a"})
    assert runner.live == {"a.txt": "base", "d/z.txt": "z"}
