"""The AppWorld worker: runs INSIDE the AppWorld venv and holds one task's world and its branches.

agentspec starts it (``envs/appworld/backend.py``) as ``<venv python> worker.py`` with ``APPWORLD_ROOT`` set and
talks JSON lines over the pipe: one request per line on stdin, one reply per line on the protocol stream (the
original stdout; everything AppWorld prints goes to stderr).  Every request has an ``id`` its reply repeats.

Why branches and not one world per fork: AppWorld keeps a task's state in process-wide in-memory SQLite databases
(``:memory:task_output-<task_id>``) and ``AppWorld.initialize``/``load_state`` call ``AppWorld.close_all()``, which
closes every world of the process.  So the worker keeps ONE world and many *branches* (``live`` and the forks);
the world holds the state of the one branch last used, every other branch's state is a frozen :class:`State`:

- the ``sqlite3`` ``backup()`` of every app database of the world (into private in-memory connections),
- each database's change log (AppWorld saves it as the task's output), the model hash counters evaluation reads,
- ``num_interactions``, the environment I/O log, the API request log, the ``random`` state (logins draw
  token expiries from it) and each app's logged-out tokens (its login manager keeps them in Python).

Running a call on a branch first swaps the world to it (backup out of the world, backup in), so a fork never
aliases live state; a snapshot is the frozen state of a branch; commit hands a fork's state to ``live``.

Requests (``op``): ``open`` (task_id, experiment), ``execute`` (branch, code), ``snapshot`` (branch) -> snapshot,
``fork`` (snapshot) -> branch, ``commit`` (branch), ``discard`` (branch), ``drop`` (snapshots), ``save`` (branch,
path), ``load`` (path), ``evaluate``, ``close``.  Replies: ``{"id", "ok": true, ...}`` or ``{"id", "ok": false,
"error": "..."}``.  An ``execute`` output longer than ``MAX_OUTPUT_CHARS`` is cut (and says so).

Branches share this process, so they are isolated from each other's *calls* only while no call runs code of the
agent's: that holds for the API tools (agentspec writes their code), not for code actions.  For those,
``envs/appworld/isolated.py`` runs one jailed worker per branch, each holding only ``live``; ``save``/``load`` move a
branch's state between processes as a file (the pickled :class:`State`, SQLite databases serialized).
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import pickle
import random
import sqlite3
import sys
import traceback
from dataclasses import dataclass
from typing import Any, TextIO

MAX_OUTPUT_CHARS = 1_000_000
"""An ``execute`` output is cut to this many characters (the model could not read more, the pipe need not carry it)."""
END_STATE_PARTS = ("dbs", "logs", "version")
"""The folders of a task's output that ``appworld evaluate`` and AppWorld's leaderboard bundle read."""
MAX_END_STATE_CHARS = 8_000_000
"""Past this many characters of end state, the logs are left out of it (the databases never are)."""


@dataclass(frozen=True)
class State:
    """A branch's frozen state (never changed once made; forks of one snapshot share it)."""

    dbs: dict[str, sqlite3.Connection]
    changes: dict[str, list]
    hashes: Any
    num_interactions: int
    environment_io: list
    requests: list
    random_state: Any
    revoked: dict[str, set[str]]
    """App -> access tokens logged out (kept by each app's login manager in Python, not in its database)."""


def _login_managers() -> dict[str, Any]:
    """The login manager of every app whose API module is loaded (logouts live there)."""
    managers = {}
    for name, module in list(sys.modules.items()):
        if name.startswith("appworld.apps.") and name.endswith(".apis") and hasattr(module, "logging_manager"):
            manager = module.logging_manager
            if hasattr(manager, "blacklisted_tokens"):
                managers[name.split(".")[2]] = manager
    return managers


class Worker:
    """One AppWorld task and its branches (see the module docstring)."""

    def __init__(self) -> None:
        self.world: Any = None
        self.loaded: str | None = None
        """The branch whose state the world holds now (None: no branch's, e.g. after its discard)."""
        self.branches: dict[str, State | None] = {}
        """Branch id -> its frozen state; None for the loaded branch (the world is its state)."""
        self.snapshots: dict[str, State] = {}
        self._ids = itertools.count(1)

    # --- the world's state -------------------------------------------------------------

    def _cache_entries(self) -> dict[str, tuple[Any, Any]]:
        from appworld.apps.model_lib import CachedDBHandler

        marker = f"task_output-{self.world.task_id}"
        return {path: entry for path, entry in CachedDBHandler.cache.items() if marker in path}

    def _capture(self) -> State:
        from appworld.apps.model_lib import ModelHashHandler

        dbs: dict[str, sqlite3.Connection] = {}
        changes: dict[str, list] = {}
        for path, (engine, tracker) in self._cache_entries().items():
            target = sqlite3.connect(":memory:", check_same_thread=False)
            engine.raw_connection().connection.backup(target)
            dbs[path] = target
            changes[path] = copy.deepcopy(tracker.changes)
        home = self.world.output_db_home_path_in_memory
        return State(dbs=dbs, changes=changes, hashes=copy.deepcopy(ModelHashHandler.data[home]),
                     num_interactions=self.world.num_interactions,
                     environment_io=copy.deepcopy(self.world.environment_io),
                     requests=copy.deepcopy(self.world.requester.request_tracker.requests),
                     random_state=random.getstate(),
                     revoked={app: set(m.blacklisted_tokens) for app, m in _login_managers().items()})

    def _restore(self, state: State) -> None:
        from appworld.apps.model_lib import ModelHashHandler

        entries = self._cache_entries()
        if set(entries) != set(state.dbs):
            raise RuntimeError("the world's databases changed since the snapshot was taken")
        for path, (engine, tracker) in entries.items():
            state.dbs[path].backup(engine.raw_connection().connection)
            tracker.changes = copy.deepcopy(state.changes[path])
        ModelHashHandler.data[self.world.output_db_home_path_in_memory] = copy.deepcopy(state.hashes)
        self.world.num_interactions = state.num_interactions
        self.world.environment_io = copy.deepcopy(state.environment_io)
        self.world.requester.request_tracker.requests = copy.deepcopy(state.requests)
        random.setstate(state.random_state)
        for app, manager in _login_managers().items():
            manager.blacklisted_tokens = set(state.revoked.get(app, ()))

    def _switch(self, branch: str) -> None:
        """Make the world hold ``branch``'s state, freezing the state it held into its branch first."""
        if branch not in self.branches:
            raise KeyError(f"unknown branch {branch}")
        if self.loaded == branch:
            return
        if self.loaded is not None and self.loaded in self.branches:
            self.branches[self.loaded] = self._capture()
        state = self.branches[branch]
        assert state is not None  # only the loaded branch has no frozen state
        self._restore(state)
        self.branches[branch] = None
        self.loaded = branch

    def _frozen(self, branch: str) -> State:
        if branch not in self.branches:
            raise KeyError(f"unknown branch {branch}")
        state = self.branches[branch]
        if state is None:  # loaded: freeze what the world holds (it stays loaded)
            state = self._capture()
        return state

    # --- requests ------------------------------------------------------------------------

    def op_open(self, task_id: str, experiment: str = "agentspec", timeout_s: int | None = 100) -> dict:
        from appworld.environment import AppWorld

        self.world = AppWorld(task_id=task_id, experiment_name=experiment, timeout_seconds=timeout_s)
        self.branches = {"live": None}
        self.loaded = "live"
        return {"branch": "live", "instruction": self.world.task.instruction}

    def op_execute(self, branch: str, code: str) -> dict:
        self._switch(branch)
        output = self.world.execute(code)
        if len(output) > MAX_OUTPUT_CHARS:
            output = f"{output[:MAX_OUTPUT_CHARS]}\n[output cut: {len(output) - MAX_OUTPUT_CHARS} more characters]"
        return {"output": output}

    def op_snapshot(self, branch: str) -> dict:
        snapshot = f"snap-{next(self._ids)}"
        self.snapshots[snapshot] = self._frozen(branch)
        return {"snapshot": snapshot}

    def op_fork(self, snapshot: str) -> dict:
        branch = f"branch-{next(self._ids)}"
        self.branches[branch] = self.snapshots[snapshot]
        return {"branch": branch}

    def op_commit(self, branch: str) -> dict:
        if branch == "live":
            raise ValueError("cannot commit the live branch into itself")
        if self.loaded == branch:
            self.loaded = "live"
            self.branches["live"] = None
        else:
            if self.loaded == "live":
                self.loaded = None  # the world holds live's old state, which is dropped
            self.branches["live"] = self._frozen(branch)
        del self.branches[branch]
        return {}

    def op_discard(self, branch: str) -> dict:
        if branch == "live":
            raise ValueError("cannot discard the live branch")
        self.branches.pop(branch, None)
        if self.loaded == branch:
            self.loaded = None
        return {}

    def op_drop(self, snapshots: list[str]) -> dict:
        for snapshot in snapshots:
            self.snapshots.pop(snapshot, None)
        return {}

    def op_save(self, branch: str, path: str) -> dict:
        """Write ``branch``'s state to the file ``path`` (for :meth:`op_load` in another worker of the same task)."""
        state = self._frozen(branch)
        fields = {**state.__dict__, "dbs": {name: db.serialize() for name, db in state.dbs.items()}}
        with open(path, "wb") as fh:
            pickle.dump(fields, fh, protocol=pickle.HIGHEST_PROTOCOL)
        return {}

    def op_load(self, path: str) -> dict:
        """Make ``live`` the state saved in ``path`` (by :meth:`op_save` in a worker of the same task), dropping
        every other branch and snapshot."""
        with open(path, "rb") as fh:
            fields = pickle.load(fh)  # noqa: S301 - written by a worker of this task, handed over by agentspec
        dbs = {}
        for name, data in fields.pop("dbs").items():
            db = sqlite3.connect(":memory:", check_same_thread=False)
            db.deserialize(data)
            dbs[name] = db
        self.branches, self.snapshots = {"live": State(dbs=dbs, **fields)}, {}
        self.loaded = None
        self._switch("live")
        return {}

    def op_evaluate(self) -> dict:
        """AppWorld's own evaluation of the live state (its tests, as ``TestTracker.to_dict``), with the task
        output it scored as ``end_state`` (:func:`end_state`), so that ``appworld evaluate`` can score it again."""
        self._switch("live")
        # The evaluator reads the task's output databases as the last execute saved them, which may have been a
        # fork's: save live's now.
        self.world._save_state(self.world.output_db_home_path_on_disk)
        self.world.save_logs()
        evaluation = self.world.evaluate().to_dict()
        return {"evaluation": {**evaluation, "end_state": end_state(self.world)}}

    def op_close(self) -> dict:
        if self.world is not None:
            self.world.close()
            self.world = None
        return {}


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


def end_state(world: Any) -> dict:
    """The task's output folder as AppWorld saved it (``dbs``, ``logs``, ``version``), compactly.

    ``{"appended": {relpath: text}, "files": {relpath: text}, "omitted": [relpath]}``: a database change log
    (``dbs/<app>.jsonl``) that starts with the task input's log of that app is kept as what follows it (the
    episode's own changes; the input's log can be as large as the task's data); every other file whole.  The logs
    (not needed to score) are omitted, and listed, once the whole would pass :data:`MAX_END_STATE_CHARS`.
    """
    from appworld.apps.model_lib import get_db_home_path

    inputs = get_db_home_path(storage_type="disk", type="task_input", task_id=world.task_id)
    state: dict = {"appended": {}, "files": {}, "omitted": []}
    size = 0
    for part in END_STATE_PARTS:
        folder = os.path.join(world.output_directory, part)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            relpath, text = f"{part}/{name}", _read(os.path.join(folder, name))
            given = os.path.join(inputs, name)
            prefix = _read(given) if part == "dbs" and name.endswith(".jsonl") and os.path.isfile(given) else None
            if prefix is not None and text.startswith(prefix):
                kind, text = "appended", text[len(prefix):]
            elif part == "logs" and size + len(text) > MAX_END_STATE_CHARS:
                state["omitted"].append(relpath)
                continue
            else:
                kind = "files"
            state[kind][relpath] = text
            size += len(text)
    return state


def serve(requests: TextIO, replies: TextIO) -> None:
    """Answer requests until ``close`` or the end of input."""
    worker = Worker()
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        ident, op = request.pop("id", None), request.pop("op", "")
        try:
            handler = getattr(worker, f"op_{op}", None)
            if handler is None:
                raise ValueError(f"unknown op {op!r}")
            reply = {"id": ident, "ok": True, **handler(**request)}
        except Exception as exc:  # noqa: BLE001 - every failure goes back over the pipe; the worker stays up
            traceback.print_exc(file=sys.stderr)
            reply = {"id": ident, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
        if op == "close":
            return


def main() -> None:
    # The protocol keeps the real stdout; fd 1 then points at stderr, so AppWorld's prints never reach the pipe.
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    protocol.write(json.dumps({"id": None, "ok": True, "ready": True}) + "\n")
    protocol.flush()
    serve(sys.stdin, protocol)


if __name__ == "__main__":
    main()
