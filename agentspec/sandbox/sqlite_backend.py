"""SQLite sandboxes: a database file is the live state; snapshots and forks are in-memory copies.

::

    snapshot = backup API: live file -> a frozen in-memory database (reused while live is unchanged)
    fork     = backup API: snapshot -> a new in-memory database the fork's tools use
    commit   = backup API: fork -> the live file (one transaction: readers see all of it or none)
    discard  = close the fork's connection

The backup API rather than savepoints: savepoints give one nested line of
states on one connection, while speculation needs several independent forks of
one snapshot (and forks of forks) alive at once.

Tools are an ordinary :class:`~agentspec.tools.Toolkit` built over a connection
(:class:`SqliteTools` by default).  They run in a worker thread; cancelling a
call interrupts its statement (``Connection.interrupt``) for real.

What is enforced on every connection (live and forks), whatever the tools run:
no other database file can be opened (``ATTACH`` and ``VACUUM INTO`` are
refused: the attached-databases limit is 0), and a database holds at most
``max_bytes`` (1 GiB by default; SQLite's ``max_page_count``, which the tools
may not change: writes past it fail with "database or disk is full").  Forks
live in memory, so ``max_bytes`` also bounds each fork's memory.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from agentspec.errors import ConfigError, SnapshotError
from agentspec.snapshot import Branch, LineageBackend
from agentspec.tools import Toolkit, tool
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec


class SqliteTools(Toolkit):
    """Generic SQL tools over one connection: read-only queries, mutating statements, the schema."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @tool(Effect.READ_ONLY)
    def sql_query(self, sql: str, max_rows: int = 200) -> str:
        """Run a read-only SQL query and return the rows as JSON.

        Args:
            sql: One SELECT (or other read-only) statement.
            max_rows: Most rows to return.
        """
        self._conn.execute("PRAGMA query_only = ON")  # the database itself refuses writes
        try:
            cursor = self._conn.execute(sql)
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchmany(max_rows)
        finally:
            self._conn.execute("PRAGMA query_only = OFF")
        return json.dumps({"columns": columns, "rows": rows})

    @tool(Effect.MUTATING)
    def sql_execute(self, sql: str) -> str:
        """Run SQL statements that change the database (a script of several statements is allowed).

        Args:
            sql: The statements, separated by semicolons.
        """
        before = self._conn.total_changes
        self._conn.executescript(sql)
        return f"ok: {self._conn.total_changes - before} row(s) changed"

    @tool(Effect.READ_ONLY)
    def list_tables(self) -> str:
        """List the tables with their CREATE statements."""
        rows = self._conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
        return json.dumps(dict(rows))


ToolkitFactory = Callable[[sqlite3.Connection], Toolkit]


_LOCKED_PRAGMAS = frozenset({"max_page_count", "page_size", "writable_schema", "trusted_schema", "mmap_size"})


def _guard(action: int, arg1: str | None, arg2: str | None, *_: object) -> int:
    """Authorizer: the limits on a connection are not the tools' to change."""
    if action == sqlite3.SQLITE_PRAGMA and arg2 is not None and (arg1 or "").lower() in _LOCKED_PRAGMAS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _confine(conn: sqlite3.Connection, max_bytes: int) -> sqlite3.Connection:
    """No other database files (ATTACH, VACUUM INTO), at most ``max_bytes``, and tools cannot lift either."""
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {max(1, max_bytes // page)}")
    conn.set_authorizer(_guard)
    return conn


def _memory(max_bytes: int) -> sqlite3.Connection:
    return _confine(sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None), max_bytes)


class _Frozen:
    """An in-memory database nobody writes to any more; closed when the last snapshot holding it goes."""

    __slots__ = ("conn", "lock", "__weakref__")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()  # one backup at a time out of a connection

    def __del__(self) -> None:
        self.conn.close()


@dataclass(frozen=True)
class SqliteRef:
    """What a SQLite snapshot holds: a frozen in-memory copy."""

    frozen: _Frozen
    backend_id: int


@dataclass(eq=False)
class _Db:
    """One database holding a state (live or a sandbox's) and the toolkit over it."""

    conn: sqlite3.Connection
    toolkit: Toolkit
    dirty: bool = False
    cached: SqliteRef | None = None


@dataclass(eq=False, kw_only=True)
class SqliteSandbox(Branch[_Db]):
    """A fork: an in-memory copy of a snapshot."""

    prefix = "sql"


def _backup(source: sqlite3.Connection, target: sqlite3.Connection, lock: threading.Lock | None = None) -> None:
    if lock is None:
        source.backup(target)
        return
    with lock:
        source.backup(target)


class SqliteBackend(LineageBackend[_Db]):
    """A SQLite database file forked through the backup API.  See the module docstring."""

    kind = "SQLite"

    def __init__(self, path: Path, toolkit: ToolkitFactory = SqliteTools, *, max_bytes: int = 2**30) -> None:
        if max_bytes <= 0:
            raise ConfigError(f"max_bytes must be positive, not {max_bytes!r}")
        super().__init__()
        self.path = path
        self.max_bytes = max_bytes
        self._factory = toolkit

    async def start(self) -> None:
        if self._started:
            return
        if not self.path.parent.is_dir():
            raise ConfigError(f"no folder for the database {self.path}")
        try:
            conn = _confine(sqlite3.connect(self.path, check_same_thread=False, isolation_level=None), self.max_bytes)
        except sqlite3.Error as exc:
            raise SnapshotError(f"cannot open {self.path}: {exc}") from exc
        self._set_live(_Db(conn=conn, toolkit=self._factory(conn)))

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return self._require_live().toolkit.specs()

    def effect(self, name: str) -> Effect:
        kit = self._require_live().toolkit
        return kit.effect(name) if kit.has_tool(name) else Effect.MUTATING

    async def close(self) -> None:
        for box in list(self._sandboxes):
            await self.discard(box)  # waits for its interrupted statement: a connection in use cannot close
        was_live = self._started
        self._forget_sandboxes()
        if was_live:
            self._head.state.conn.close()

    # ------------------------------------------------------------------ the mechanism

    def _branch(self, state: _Db, lineage: tuple[str, ...], token: str) -> SqliteSandbox:
        return SqliteSandbox(calls=self, state=state, lineage=lineage, token=token)

    def _accepts(self, ref: object) -> bool:
        return isinstance(ref, SqliteRef) and ref.backend_id == id(self)

    async def _freeze(self, db: _Db) -> SqliteRef:
        if not db.dirty and db.cached is not None:
            return db.cached
        copy = _memory(self.max_bytes)
        await anyio.to_thread.run_sync(_backup, db.conn, copy)
        db.cached = SqliteRef(frozen=_Frozen(copy), backend_id=id(self))
        db.dirty = False
        return db.cached

    async def _fork_state(self, ref: SqliteRef) -> _Db:
        conn = _memory(self.max_bytes)
        try:
            await anyio.to_thread.run_sync(_backup, ref.frozen.conn, conn, ref.frozen.lock)
        except BaseException:
            conn.close()
            raise
        return _Db(conn=conn, toolkit=self._factory(conn), cached=ref)  # equal to the snapshot until it runs a call

    async def _promote(self, db: _Db, live: _Db) -> _Db:
        """Write the sandbox's database into the live file (one transaction: readers see all of it or none)."""
        await anyio.to_thread.run_sync(_backup, db.conn, live.conn)
        live.dirty, live.cached = True, None
        db.conn.close()
        return live

    async def _drop(self, db: _Db) -> None:
        db.conn.close()

    def _stop(self, branch: Branch[_Db]) -> None:
        branch.state.conn.interrupt()  # the running statement fails with "interrupted"

    async def _run(self, db: _Db, step: object, call: ToolCall, requestor: Requestor) -> Observation:
        """Run a tool in a worker thread (caller holds the lock); cancellation interrupts its statement."""
        if not (db.toolkit.has_tool(call.name) and db.toolkit.effect(call.name) is Effect.READ_ONLY):
            db.dirty = True
        done = threading.Event()

        def work() -> Observation:
            try:
                return db.toolkit.run(call, requestor)
            finally:
                done.set()

        try:
            return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except BaseException:
            db.conn.interrupt()  # the statement stops with "interrupted"; wait so the connection is free
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(done.wait, 30.0)
            raise
