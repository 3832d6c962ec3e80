"""Files the user names on the command line: ``--out`` folders and input files, with one-line errors."""

from __future__ import annotations

from pathlib import Path

from agentspec.errors import ConfigError


def read_user_file(path: str | Path, what: str) -> str:
    """The UTF-8 text of a file the user named; :class:`ConfigError` (one line) when it cannot be read or decoded."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from exc


def out_dir(path: str | None) -> Path | None:
    """``--out``: a folder to create or reuse; :class:`ConfigError` when a file is in the way."""
    if path is None:
        return None
    out = Path(path)
    for parent in (out, *out.parents):
        if parent.exists() and not parent.is_dir():
            where = f"{path}: {parent}" if parent != out else path  # the path once when it is the file
            raise ConfigError(f"--out {where} is a file, not a folder")
    return out
