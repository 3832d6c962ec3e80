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

import itertools
import json
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import anyio

from agentspec.errors import ConfigError, SnapshotError
from agentspec.snapshot import Sandbox, Snapshot, check_descends, new_token
from agentspec.tools import Toolkit, tool
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec

_ids = itertools.count(1)


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
    lock: anyio.Lock = field(default_factory=anyio.Lock)


@dataclass(eq=False)
class SqliteSandbox:
    """A fork: an in-memory copy of a snapshot."""

    backend: SqliteBackend = field(repr=False)
    db: _Db = field(repr=False)
    lineage: tuple[str, ...]
    token: str
    id: str = field(default_factory=lambda: f"sql-{next(_ids)}")
    discarded: bool = False

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        return await self.backend._execute_in(self, call, requestor)


def _backup(source: sqlite3.Connection, target: sqlite3.Connection, lock: threading.Lock | None = None) -> None:
    if lock is None:
        source.backup(target)
        return
    with lock:
        source.backup(target)


class SqliteBackend:
    """A SQLite database file forked through the backup API.  See the module docstring."""

    def __init__(self, path: Path, toolkit: ToolkitFactory = SqliteTools, *, max_bytes: int = 2**30) -> None:
        if max_bytes <= 0:
            raise ConfigError(f"max_bytes must be positive, not {max_bytes!r}")
        self.path = path
        self.max_bytes = max_bytes
        self.live_token = new_token()
        self._factory = toolkit
        self._live: _Db | None = None
        self._live_lock = anyio.Lock()  # guards the live slot: live calls, live snapshots, commits
        self._sandboxes: set[SqliteSandbox] = set()

    @classmethod
    async def open(cls, path: Path, toolkit: ToolkitFactory = SqliteTools, *, max_bytes: int = 2**30) -> SqliteBackend:
        backend = cls(path, toolkit, max_bytes=max_bytes)
        await backend.start()
        return backend

    async def __aenter__(self) -> SqliteBackend:
        await self.start()
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.close()

    async def start(self) -> None:
        if self._live is not None:
            return
        if not self.path.parent.is_dir():
            raise ConfigError(f"no folder for the database {self.path}")
        try:
            conn = _confine(sqlite3.connect(self.path, check_same_thread=False, isolation_level=None), self.max_bytes)
        except sqlite3.Error as exc:
            raise SnapshotError(f"cannot open {self.path}: {exc}") from exc
        self._live = _Db(conn=conn, toolkit=self._factory(conn))

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return self._require_live().toolkit.specs()

    def effect(self, name: str) -> Effect:
        kit = self._require_live().toolkit
        return kit.effect(name) if kit.has_tool(name) else Effect.MUTATING

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        """Run a call on the live database (a call that may write gives live a new token)."""
        async with self._live_lock:
            observation = await self._run(self._require_live(), call, requestor)
            if self.effect(call.name) is not Effect.READ_ONLY:
                self.live_token = new_token()  # read-only calls leave live, and every fork of it, valid
        return observation

    async def snapshot(self, source: Sandbox | None = None) -> Snapshot:
        if source is None:
            async with self._live_lock:
                return Snapshot(ref=await self._freeze(self._require_live()), lineage=(self.live_token,))
        sandbox = self._own(source)
        async with sandbox.db.lock:
            self._own(sandbox)
            return Snapshot(ref=await self._freeze(sandbox.db), lineage=(*sandbox.lineage, sandbox.token))

    async def fork(self, snapshot: Snapshot) -> SqliteSandbox:
        ref = snapshot.ref
        if not isinstance(ref, SqliteRef) or ref.backend_id != id(self):
            raise SnapshotError("snapshot does not belong to this SQLite backend")
        conn = _memory(self.max_bytes)
        try:
            await anyio.to_thread.run_sync(_backup, ref.frozen.conn, conn, ref.frozen.lock)
        except BaseException:
            conn.close()
            raise
        db = _Db(conn=conn, toolkit=self._factory(conn), cached=ref)  # equal to the snapshot until it runs a call
        sandbox = SqliteSandbox(backend=self, db=db, lineage=snapshot.lineage, token=snapshot.token)
        self._sandboxes.add(sandbox)
        return sandbox

    async def commit(self, sandbox: Sandbox) -> None:
        """Write the sandbox's database into the live file; :class:`StaleSnapshotError` unless it descends."""
        box = self._own(sandbox)
        async with self._live_lock, box.db.lock:
            self._own(box)
            live = self._require_live()
            check_descends(box, self.live_token)
            with anyio.CancelScope(shield=True):  # a half-written commit is not an option
                await anyio.to_thread.run_sync(_backup, box.db.conn, live.conn)
                live.dirty, live.cached = True, None
                self.live_token = box.token
                box.discarded = True
                self._sandboxes.discard(box)
                box.db.conn.close()

    async def discard(self, sandbox: Sandbox) -> None:
        if not isinstance(sandbox, SqliteSandbox) or sandbox.backend is not self or sandbox.discarded:
            return
        sandbox.discarded = True
        sandbox.db.conn.interrupt()  # stop a running statement
        with anyio.CancelScope(shield=True):
            async with sandbox.db.lock:
                self._sandboxes.discard(sandbox)
                sandbox.db.conn.close()

    async def close(self) -> None:
        for sandbox in list(self._sandboxes):
            await self.discard(sandbox)
        if self._live is not None:
            self._live.conn.close()
            self._live = None

    # ------------------------------------------------------------------ internals

    def _require_live(self) -> _Db:
        if self._live is None:
            raise SnapshotError("SQLite backend is not started (or already closed)")
        return self._live

    def _own(self, sandbox: Sandbox) -> SqliteSandbox:
        if not isinstance(sandbox, SqliteSandbox) or sandbox.backend is not self or sandbox.discarded:
            raise SnapshotError("can only use a live sandbox of this backend")
        return sandbox

    async def _freeze(self, db: _Db) -> SqliteRef:
        if not db.dirty and db.cached is not None:
            return db.cached
        copy = _memory(self.max_bytes)
        await anyio.to_thread.run_sync(_backup, db.conn, copy)
        db.cached = SqliteRef(frozen=_Frozen(copy), backend_id=id(self))
        db.dirty = False
        return db.cached

    async def _execute_in(self, sandbox: SqliteSandbox, call: ToolCall, requestor: Requestor) -> Observation:
        self._own(sandbox)
        async with sandbox.db.lock:
            self._own(sandbox)
            observation = await self._run(sandbox.db, call, requestor)
            if self.effect(call.name) is not Effect.READ_ONLY:
                sandbox.token = new_token()
        return observation

    async def _run(self, db: _Db, call: ToolCall, requestor: Requestor) -> Observation:
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
