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

The same key signs every run-log record (:func:`sign`, see :mod:`agentspec.runtime.runlog`).  The key file is
made atomically and refused unless it is 32 bytes, this user's, and readable by nobody else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import pickle
import secrets
import stat
import tempfile
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


KEY_BYTES = 32
_keys: dict[Path, bytes] = {}


def _key() -> bytes:
    """This user's signing key (checkpoints and run-log records), made on first use (read once per process and path)."""
    path = key_path()
    if path not in _keys:
        _keys[path] = _read_or_make_key(path)
    return _keys[path]


def _read_or_make_key(path: Path) -> bytes:
    """The key in ``path``, made first when there is none.

    The key is written whole to a private temporary file (fsynced) and then linked to ``path``: a link never
    replaces a file, so of concurrent makers exactly one wins and every other reads the winner's complete key, and a
    crash never leaves a short key behind.  A key that is not this user's alone (wrong length, readable or writable by
    others, another owner) is refused: whoever can read it can forge checkpoints that run code when resumed.
    """
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".runlog.key.", dir=path.parent)  # mode 0600, never another's file
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(KEY_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: use theirs
        _fsync_dir(path.parent)
    finally:
        os.unlink(tmp)
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    """Read and check the key file; FileNotFoundError when there is none, ConfigError when it cannot be trusted."""
    fix = f"delete {path} to make a new key (logs it signed can then no longer be resumed)"
    try:
        # Not a link (it could point at anyone's file); non-blocking, so that a FIFO planted there is refused below
        # instead of waiting for a writer forever.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(f"the run-log key {path} cannot be read ({exc.strerror}); {fix}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a folder or a FIFO: checked before reading from it
        os.close(fd)
        raise ConfigError(f"the run-log key {path} is not a regular file; {fix}")
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if info.st_uid != os.getuid():
            raise ConfigError(f"the run-log key {path} belongs to user {info.st_uid}, not to you ({os.getuid()}); {fix}")
        if info.st_mode & 0o077:
            raise ConfigError(f"the run-log key {path} has mode {stat.S_IMODE(info.st_mode):04o}: others may read or "
                              f"change it, so anyone could forge a log; make it 0600 (chmod 600 {path}) or {fix}")
        key = handle.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise ConfigError(f"the run-log key {path} holds {len(key)} bytes, a key is {KEY_BYTES}; {fix}")
    return key


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tag(data: bytes) -> str:
    return hmac.new(_key(), data, hashlib.sha256).hexdigest()


def sign(data: bytes) -> str:
    """HMAC-SHA256 of ``data`` under this user's key (hex): what the run log puts on every record."""
    return _tag(data)


def signed_by_me(data: bytes, mac: str) -> bool:
    """Whether ``mac`` is :func:`sign` of ``data`` (compared in constant time)."""
    return hmac.compare_digest(_tag(data), mac)


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
