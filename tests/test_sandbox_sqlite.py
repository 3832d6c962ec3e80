"""The SQLite backend: forks by the backup API, commits into the live file, statements that really stop."""

from __future__ import annotations

import itertools
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentspec.sandbox.sqlite_backend import SqliteBackend
from agentspec.snapshot import SnapshotBackend, StaleSnapshotError
from agentspec.types import Effect, ToolCall

SLOW_QUERY = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 10000000000) SELECT count(*) FROM c"


def Q(sql: str) -> ToolCall:
    return ToolCall(name="sql_query", arguments={"sql": sql})


def X(sql: str) -> ToolCall:
    return ToolCall(name="sql_execute", arguments={"sql": sql})


def _database(path: Path, rows: dict[str, str]) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)")
        conn.executemany("INSERT INTO kv VALUES (?, ?)", rows.items())
    conn.close()
    return path


async def _rows(target: Any) -> dict[str, str]:
    obs = await target.execute(Q("SELECT k, v FROM kv ORDER BY k"))
    assert not obs.error, obs.content
    return dict(json.loads(obs.content)["rows"])


@pytest.mark.anyio
async def test_forks_are_isolated_and_commits_reach_the_file(tmp_path: Path) -> None:
    path = _database(tmp_path / "db.sqlite", {"a": "1"})
    async with SqliteBackend(path) as backend:
        assert isinstance(backend, SnapshotBackend)
        assert backend.effect("sql_query") is Effect.READ_ONLY and backend.effect("sql_execute") is Effect.MUTATING
        snap = await backend.snapshot()
        a, b = await backend.fork(snap), await backend.fork(snap)
        await a.execute(X("INSERT INTO kv VALUES ('b', '2'); UPDATE kv SET v = 'one' WHERE k = 'a'"))
        assert await _rows(a) == {"a": "one", "b": "2"}
        assert await _rows(b) == {"a": "1"} and await _rows(backend) == {"a": "1"}
        await backend.commit(a)
        with pytest.raises(StaleSnapshotError):
            await backend.commit(b)
    with sqlite3.connect(path) as conn:  # the file itself holds the committed state
        assert dict(conn.execute("SELECT k, v FROM kv").fetchall()) == {"a": "one", "b": "2"}
    conn.close()


@pytest.mark.anyio
async def test_queries_cannot_write(tmp_path: Path) -> None:
    async with SqliteBackend(_database(tmp_path / "db.sqlite", {})) as backend:
        obs = await backend.execute(Q("INSERT INTO kv VALUES ('x', 'y')"))
        assert obs.error and "readonly" in obs.content
        assert await _rows(backend) == {}


@pytest.mark.anyio
async def test_cancelling_a_call_interrupts_the_statement(tmp_path: Path) -> None:
    async with SqliteBackend(_database(tmp_path / "db.sqlite", {"a": "1"})) as backend:
        box = await backend.fork(await backend.snapshot())
        started = time.monotonic()
        with anyio.move_on_after(0.5):
            await box.execute(Q(SLOW_QUERY))
        assert time.monotonic() - started < 3
        assert await _rows(box) == {"a": "1"}  # the connection is free again at once
        results = []

        async def run() -> None:
            results.append(await box.execute(Q(SLOW_QUERY)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await anyio.sleep(0.5)
            await backend.discard(box)  # discard interrupts it too
        assert results[0].error and "interrupted" in results[0].content
        assert time.monotonic() - started < 6


KEYS = ["a", "b", "c"]
OPS = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(KEYS), st.text("xyz01", min_size=1, max_size=4)),
    st.tuples(st.just("del"), st.sampled_from(KEYS), st.just("")),
)
_files = itertools.count()


def _apply(model: dict[str, str], op: tuple[str, str, str]) -> ToolCall:
    kind, key, value = op
    if kind == "put":
        model[key] = value
        return X(f"INSERT OR REPLACE INTO kv VALUES ('{key}', '{value}')")
    model.pop(key, None)
    return X(f"DELETE FROM kv WHERE k = '{key}'")


@settings(max_examples=40, deadline=None)
@given(
    ops_a=st.lists(OPS, max_size=5),
    ops_c=st.lists(OPS, max_size=4),
    chain=st.booleans(),
    action=st.sampled_from(["commit_a", "commit_c", "discard"]),
)
def test_commit_and_discard_match_a_model(tmp_path_factory: pytest.TempPathFactory, ops_a: list[Any], ops_c: list[Any], chain: bool, action: str) -> None:
    path = _database(tmp_path_factory.getbasetemp() / f"prop{next(_files)}.sqlite", {"a": "0"})

    async def example() -> None:
        live = {"a": "0"}
        async with SqliteBackend(path) as backend:
            snap = await backend.snapshot()
            a, b = await backend.fork(snap), await backend.fork(snap)
            model_a = dict(live)
            for op in ops_a:
                await a.execute(_apply(model_a, op))
            assert await _rows(a) == model_a and await _rows(b) == live and await _rows(backend) == live
            c, model_c = None, dict(model_a)
            if chain:
                c = await backend.fork(await backend.snapshot(a))
                for op in ops_c:
                    await c.execute(_apply(model_c, op))
                assert await _rows(c) == model_c and await _rows(a) == model_a
            if action == "commit_c" and c is not None:
                await backend.commit(c)
                live = model_c
            elif action == "commit_a":
                await backend.commit(a)
                live = model_a
            assert await _rows(backend) == live

    anyio.run(example)


@pytest.mark.anyio
async def test_tools_cannot_write_other_files(tmp_path: Path) -> None:
    """ATTACH and VACUUM INTO would write any path on the host: refused on live and on forks."""
    path = _database(tmp_path / "db.sqlite", {"a": "1"})
    async with SqliteBackend(path) as backend:
        box = await backend.fork(await backend.snapshot())
        for target in (backend, box):
            for sql in (f"ATTACH '{tmp_path}/evil.db' AS e; CREATE TABLE e.t (x)", f"VACUUM INTO '{tmp_path}/copy.db'"):
                obs = await target.execute(X(sql))
                assert obs.error and "attached" in obs.content, obs.content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db.sqlite"]


@pytest.mark.anyio
async def test_size_limit_is_enforced(tmp_path: Path) -> None:
    path = _database(tmp_path / "db.sqlite", {"a": "1"})
    async with SqliteBackend(path, max_bytes=2 * 2**20) as backend:
        box = await backend.fork(await backend.snapshot())
        grow = "CREATE TABLE big (b BLOB); " + "INSERT INTO big VALUES (zeroblob(500000)); " * 8
        for target in (box, backend):
            obs = await target.execute(X(grow))
            assert obs.error and "full" in obs.content, obs.content
            lifted = await target.execute(X("PRAGMA max_page_count = 1000000"))
            assert lifted.error and "not authorized" in lifted.content, lifted.content
    assert path.stat().st_size <= 2 * 2**20
