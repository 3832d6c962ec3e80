"""Sandbox base images without a registry: built here from Debian packages, cached by content hash.

Two kinds of definition (TOML files, see ``agentspec/sandbox/definitions/``)::

    name = "agentspec-bookworm"       # kind "debootstrap": hermetic, ~1 min the first time
    kind = "debootstrap"
    suite = "bookworm"
    packages = ["python3"]

    name = "agentspec-dev"            # kind "host-usr": a skeleton image (seconds); containers
    kind = "host-usr"                 # bind-mount this host's /usr read-only (not hermetic)

An image is tagged ``NAME:DIGEST`` where DIGEST hashes the definition (and,
for ``host-usr``, the skeleton's bytes), so an unchanged definition is never
rebuilt.  A debootstrap root filesystem is also kept as a tarball in the user
cache, so an engine with an empty data root re-imports it in seconds.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors

from agentspec.data import cache_root
from agentspec.errors import ConfigError, SnapshotError
from agentspec.sandbox._layers import remove_tree
from agentspec.sandbox.containers import IMAGE, MOUNTS, translated

RECIPE_VERSION = 1
"""Bump when the build steps change, so cached images are rebuilt."""

Kind = Literal["host-usr", "debootstrap"]


@dataclass(frozen=True)
class ImageDefinition:
    """A sandbox base image: Debian packages (debootstrap) or a skeleton over the host's /usr."""

    name: str
    kind: Kind = "host-usr"
    suite: str = "bookworm"
    variant: str = "minbase"
    packages: tuple[str, ...] = ("python3",)
    mirror: str = "http://deb.debian.org/debian"
    uid: int = 1000
    description: str = field(default="", compare=False)

    @classmethod
    def load(cls, path: Path) -> ImageDefinition:
        """Read a definition from a TOML file."""
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read sandbox definition {path}: {exc}") from exc
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown or "name" not in data:
            raise ConfigError(f"{path}: needs 'name'; unknown keys {sorted(unknown)}")
        if data.get("kind", "host-usr") not in ("host-usr", "debootstrap"):
            raise ConfigError(f"{path}: kind must be 'host-usr' or 'debootstrap'")
        if "packages" in data:
            data["packages"] = tuple(data["packages"])
        return cls(**data)

    def digest(self, extra: bytes = b"") -> str:
        basis = {k: v for k, v in asdict(self).items() if k != "description"}
        text = json.dumps({"recipe": RECIPE_VERSION, **basis}, sort_keys=True).encode()
        return hashlib.sha256(text + extra).hexdigest()


@dataclass(frozen=True)
class BuiltImage:
    """The result of a build: the tag to run, the engine's image id, and whether the cache answered."""

    tag: str
    id: str
    cached: bool
    seconds: float
    size_bytes: int


def _passwd(uid: int) -> tuple[bytes, bytes]:
    passwd = f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{uid}:{uid}:sandbox:/workspace:/bin/sh\n"
    group = f"root:x:0:\nsandbox:x:{uid}:\n"
    return passwd.encode(), group.encode()


def skeleton_tar(definition: ImageDefinition) -> bytes:
    """The root filesystem of a ``host-usr`` image: directories, symlinks into /usr, users (deterministic)."""
    buf = io.BytesIO()
    passwd, group = _passwd(definition.uid)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:

        def add(name: str, kind: bytes, *, mode: int = 0o755, uid: int = 0, data: bytes = b"", link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid, info.mtime = kind, mode, uid, uid, 0
            info.linkname = link
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            tf.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

        # /sbin stays a real directory: Docker mounts its init at /sbin/docker-init before /usr is bound.
        for name in ("usr", "etc", "opt", "proc", "sys", "dev", "sbin", "root", "var", "run"):
            add(name, tarfile.DIRTYPE)
        add("tmp", tarfile.DIRTYPE, mode=0o1777)
        add("workspace", tarfile.DIRTYPE, uid=definition.uid)
        for name in ("bin", "lib", "lib64"):
            add(name, tarfile.SYMTYPE, link=f"usr/{name}")
        add("etc/passwd", tarfile.REGTYPE, mode=0o644, data=passwd)
        add("etc/group", tarfile.REGTYPE, mode=0o644, data=group)
        cache = Path("/etc/ld.so.cache")
        if cache.is_file():
            add("etc/ld.so.cache", tarfile.REGTYPE, mode=0o644, data=cache.read_bytes())
    return buf.getvalue()


def _changes(definition: ImageDefinition, digest: str) -> list[str]:
    changes = [
        f"USER {definition.uid}:{definition.uid}",
        "WORKDIR /workspace",
        "ENV PATH=/usr/local/bin:/usr/bin:/bin",
        "ENV LANG=C.UTF-8",
        f"LABEL {IMAGE}={definition.name}",
        f"LABEL agentspec.digest={digest}",
    ]
    if definition.kind == "host-usr":
        changes.append(f"LABEL {MOUNTS}=/usr:/usr:ro")
    return changes


def _existing(client: docker.DockerClient, tag: str) -> Any | None:
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def build_image(
    client: docker.DockerClient,
    definition: ImageDefinition,
    *,
    cache_dir: Path | None = None,
    force: bool = False,
) -> BuiltImage:
    """Build (or find) the image of ``definition`` and tag it ``NAME:DIGEST`` and ``NAME:latest``.

    Blocking: the CLI calls it directly, async code through a worker thread.
    """
    started = time.perf_counter()
    skeleton = skeleton_tar(definition) if definition.kind == "host-usr" else b""
    digest = definition.digest(hashlib.sha256(skeleton).digest())[:16]
    tag = f"{definition.name}:{digest}"
    with translated(f"building {tag}"):
        image = None if force else _existing(client, tag)
        cached = image is not None
        if image is None:
            if definition.kind == "host-usr":
                _import(client, skeleton, tag, _changes(definition, digest))
            else:
                rootfs = _debootstrap_tarball(definition, digest, cache_dir or cache_root() / "sandbox-images", force)
                _import(client, str(rootfs), tag, _changes(definition, digest))
            image = client.images.get(tag)
        image.tag(definition.name, "latest")
        return BuiltImage(
            tag=tag, id=image.id, cached=cached, seconds=round(time.perf_counter() - started, 2),
            size_bytes=int(image.attrs.get("Size", 0)),
        )  # fmt: skip


def _import(client: docker.DockerClient, src: bytes | str, tag: str, changes: list[str]) -> None:
    repository, _, version = tag.partition(":")
    if isinstance(src, bytes):
        client.api.import_image_from_data(src, repository=repository, tag=version, changes=changes)
    else:
        client.api.import_image(src=src, repository=repository, tag=version, changes=changes)


def _debootstrap_tarball(definition: ImageDefinition, digest: str, cache_dir: Path, force: bool) -> Path:
    """The root filesystem tarball of a debootstrap definition, from the cache or built now (root only)."""
    tarball = cache_dir / f"{definition.name}-{digest}.tar"
    if tarball.is_file() and not force:
        return tarball
    if shutil.which("debootstrap") is None:
        raise ConfigError("debootstrap is not installed (apt-get install -y debootstrap), or build the host-usr image")
    if os.geteuid() != 0:
        raise ConfigError("debootstrap needs root; run `agentspec sandbox build` as root, or build the host-usr image")
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Build on tmpfs when there is one: deleting a big tree on / is slow.
    scratch = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    workdir = Path(tempfile.mkdtemp(prefix="agentspec-rootfs-", dir=scratch))
    rootfs = workdir / "rootfs"
    try:
        command = ["debootstrap", f"--variant={definition.variant}"]
        if definition.packages:
            command.append("--include=" + ",".join(definition.packages))
        command += [definition.suite, str(rootfs), definition.mirror]
        print(f"agentspec: {' '.join(command)}", file=sys.stderr, flush=True)
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        if result.returncode != 0:
            tail = result.stdout.decode(errors="replace").strip().splitlines()[-5:]
            raise SnapshotError("debootstrap failed: " + " | ".join(tail))
        _finish_rootfs(rootfs, definition.uid)
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "."], check=True)
        partial.replace(tarball)
    finally:
        remove_tree(workdir)
    return tarball


def _finish_rootfs(rootfs: Path, uid: int) -> None:
    """Add the sandbox user and /workspace; drop apt's caches (90 MB nobody in a sandbox needs)."""
    passwd, group = _passwd(uid)
    with (rootfs / "etc/passwd").open("ab") as fh:
        fh.write(passwd.splitlines(keepends=True)[1])
    with (rootfs / "etc/group").open("ab") as fh:
        fh.write(group.splitlines(keepends=True)[1])
    workspace = rootfs / "workspace"
    workspace.mkdir(exist_ok=True)
    os.chown(workspace, uid, uid)
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / sub).glob("*"):
            if entry.is_file():
                entry.unlink()


def find_definition(name_or_path: str) -> Path:
    """A definition file: a path, or NAME in ``$AGENTSPEC_SANDBOXES`` or the shipped ``definitions`` folder."""
    given = Path(name_or_path)
    if given.suffix == ".toml" or given.is_file():
        if not given.is_file():
            raise ConfigError(f"sandbox definition {given} not found")
        return given
    folders = [Path(os.environ["AGENTSPEC_SANDBOXES"])] if os.environ.get("AGENTSPEC_SANDBOXES") else []
    folders.append(Path(__file__).resolve().parent / "definitions")
    for folder in folders:
        candidate = folder / f"{name_or_path}.toml"
        if candidate.is_file():
            return candidate
    raise ConfigError(f"no sandbox definition {name_or_path!r} in {', '.join(map(str, folders))}")
