"""Checkpoints of live state for the run log: data that loading can never turn into running code.

A run log is a file a user may receive from someone else, so what ``--resume``
reads back from it must be data, not a program.  Two formats:

* ``json``: the environment's own JSON state, for environments that implement
  :class:`JsonState` (the tau2 telecom environment does).  Loading it validates
  data; nothing in it is executed.
* ``signed-pickle``: for any other Python-state environment, its pickled state
  with an HMAC-SHA256 tag keyed by a secret that never leaves this user's cache
  (``$AGENTSPEC_CACHE/runlog.key``, mode 0600).  The tag is checked before a
  single byte is unpickled, so a log edited by anyone, or written under another
  user's key, is refused instead of loaded.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import pickle
import secrets
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable

from agentspec.errors import ConfigError, SnapshotError

JSON_FORMAT = "json"
SIGNED_PICKLE_FORMAT = "signed-pickle"


@runtime_checkable
class JsonState(Protocol):
    """An environment whose whole state has a JSON form (checkpoints without pickle)."""

    def dump_state(self) -> Any:
        """The state as a JSON value."""
        ...

    def load_state(self, state: Any) -> Self:
        """A new environment in ``state`` (this one is left untouched); raises on invalid state."""
        ...


def key_path() -> Path:
    from agentspec.data import cache_root

    return cache_root() / "runlog.key"


_keys: dict[Path, bytes] = {}


def _key() -> bytes:
    """This user's checkpoint-signing key, made on first use (read once per process and path)."""
    path = key_path()
    if path not in _keys:
        _keys[path] = _read_or_make_key(path)
    return _keys[path]


def _read_or_make_key(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return path.read_bytes()
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key


def _tag(data: bytes) -> str:
    return hmac.new(_key(), data, hashlib.sha256).hexdigest()


def encode(env: Any) -> dict[str, Any] | None:
    """The checkpoint of an environment's state, or None when its state cannot be captured."""
    if isinstance(env, JsonState):
        return {"format": JSON_FORMAT, "state": env.dump_state()}
    snapshot = env.snapshot()
    if snapshot.copy is not None:
        return None  # not picklable: there is nothing durable to write
    return {"format": SIGNED_PICKLE_FORMAT, "data": base64.b64encode(snapshot.data).decode(), "mac": _tag(snapshot.data)}


def decode(template: Any, checkpoint: Any) -> Any:
    """A new environment like ``template`` in the checkpoint's state; ConfigError for anything untrusted."""
    from agentspec.env import StateSnapshot

    kind = checkpoint.get("format") if isinstance(checkpoint, dict) else None
    if kind == JSON_FORMAT and isinstance(template, JsonState):
        try:
            return template.load_state(checkpoint.get("state"))
        except Exception as exc:  # noqa: BLE001 - any validation failure means a bad log
            why = " ".join(str(exc).split())  # one line, however the validator formats it
            raise ConfigError(f"the checkpoint's state is not valid for {type(template).__name__}: {why[:300]}") from exc
    if kind == SIGNED_PICKLE_FORMAT:
        data, mac = checkpoint.get("data"), checkpoint.get("mac")
        if not isinstance(data, str) or not isinstance(mac, str):
            raise ConfigError("a signed checkpoint needs string 'data' and 'mac' fields")
        try:
            raw = base64.b64decode(data, validate=True)
        except binascii.Error as exc:
            raise ConfigError(f"a checkpoint's data is not base64: {exc}") from exc
        if not hmac.compare_digest(_tag(raw), mac):
            raise ConfigError(
                "a checkpoint's signature does not match: the log was changed, or written under another user's key "
                f"({key_path()}); refusing to load it"
            )
        try:
            return template.restore(StateSnapshot(data=raw))
        except (pickle.UnpicklingError, SnapshotError, EOFError) as exc:
            raise ConfigError(f"a signed checkpoint could not be loaded: {exc}") from exc
    raise ConfigError(f"unknown checkpoint format {kind!r} for {type(template).__name__}")
