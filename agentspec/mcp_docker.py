"""How :class:`agentspec.mcp.MCPDockerToolkit` runs a stdio MCP server in the Docker sandbox: its image, its process.

::

    async with MCPToolkit.stdio("python", "tests/servers/notes_server.py", sandbox="docker") as tools:
        box = await tools.fork(await tools.snapshot())    # a container from a commit of live's
        await box.execute(ToolCall(name="add_note", arguments={"text": "milk"}))   # its own server writes there
        await tools.commit(box)                            # the fork's container becomes live

Every state of :class:`~agentspec.sandbox.docker_backend.DockerBackend` (live, each fork) is a container, and its
server is a process in it, over its ``/workspace``, with the container's confinement (no network, a non-root user,
no capabilities, its memory, process and disk limits).  As with the overlay variant (:mod:`agentspec.mcp`), a
server is stopped before its container is committed (a snapshot after a write), promoted or removed, so this suits
only servers whose whole state is files under their working directory.

**The server's runtime.**  Containers have no network, so nothing is installed in them: the toolkit builds, once,
an image derived from the sandbox image (``agentspec-mcp:DIGEST``, labelled ``agentspec.image=agentspec-mcp``,
never swept), holding under ``/opt/agentspec-mcp``

- ``site/``: the MCP SDK and its requirements (``packages``, default ``mcp``), copied from the distributions
  installed in the Python that runs agentspec (so the same versions, with no index to ask).  Their compiled parts
  (pydantic-core...) load only in the same Python ABI: the image's ``python3`` must have the host's extension
  suffix (both Python 3.11 on these machines, where the dev image runs the host's ``/usr/bin/python3``), else
  the toolkit refuses, naming both;
- ``files/``: the program file an interpreter command runs (``python server.py``, ``node server.js``), where it is
  a file on this host (relative to the folder agentspec runs in, or absolute), at its absolute host path below
  ``files/``; that argument is rewritten to that path.  Only that file travels: a server that imports modules of
  its own should be a package listed in ``packages``.  Every other argument is the server's own, relative to its
  working directory, the workspace (``mcp-server-filesystem .`` serves the workspace, never a host folder).

The DIGEST hashes the base image's id, the host's ABI, the command, each distribution's RECORD and each file's
bytes, so a changed server or SDK builds a new image and an unchanged one is found at once.  ``python`` and
``python3`` run the image's ``python3`` with ``PYTHONPATH=/opt/agentspec-mcp/site``; any other command must be
in the image (checked once, when the image is built), else the toolkit refuses to start.

**The stdio transport** is the Docker API's exec socket (``docker exec -i`` without the CLI): the engine
multiplexes the server's stdout and stderr into frames on one connection, wrapped here as an anyio socket stream.
Why not the SDK's stdio transport over a ``docker exec -i`` subprocess: that needs the ``docker`` CLI on the host
and the engine's address in its environment (a backend given a client of another engine would start its servers
elsewhere), and killing the CLI does not stop the process in the container.  Here the server runs through the
backend's own client, as the backend's user in the backend's container; closing it closes its stdin (the MCP
shutdown), and what is left after a short grace is killed inside the container.  An engine reached over TLS is
refused (its socket cannot be wrapped).
"""

from __future__ import annotations

import hashlib
import io
import json
import socket
import ssl
import sysconfig
import tarfile
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import docker
import docker.errors
from anyio.streams.buffered import BufferedByteReceiveStream

from agentspec.errors import ConfigError, EnvError, SnapshotError
from agentspec.sandbox import containers
from agentspec.sandbox.containers import IMAGE, LABEL, MOUNTS, OWNER
from agentspec.sandbox.owner import owner_tag
from agentspec.sandbox.program import WORKSPACE

__all__ = ["RuntimeImage", "dev_image", "exec_transport", "runtime_image"]

RECIPE_VERSION = 1
"""Bump when the runtime image's layout changes, so cached images are rebuilt."""
RUNTIME_IMAGE = "agentspec-mcp"
RUNTIME_DIR = "/opt/agentspec-mcp"
SITE = f"{RUNTIME_DIR}/site"
FILES = f"{RUNTIME_DIR}/files"
PYTHONS = ("python", "python3")
#: How long a server may take to exit once its stdin is closed, before it is killed.
EXIT_GRACE_S = 2.0
#: The last bytes of a server's stderr kept, to quote when it fails.
STDERR_KEPT = 2000

# Run once per new runtime image, in a throwaway container of the base image: which Python it has and whether
# it has the server's command.
PROBE = (
    "import json, shutil, sys, sysconfig\n"
    "print(json.dumps({'version': '%d.%d.%d' % sys.version_info[:3],\n"
    "                  'ext_suffix': sysconfig.get_config_var('EXT_SUFFIX'), 'command': shutil.which(sys.argv[1])}))\n"
)


# --------------------------------------------------------------------------- the runtime image


@dataclass(frozen=True)
class RuntimeImage:
    """The derived image a server runs in: its tag, and the server's command line inside it."""

    tag: str
    argv: tuple[str, ...]
    env: tuple[str, ...]
    """``KEY=VALUE`` items the server's exec gets (its own ``env`` and, for Python, ``PYTHONPATH``)."""
    built: bool


def _distributions(packages: Iterable[str]) -> list[metadata.Distribution]:
    """The installed distributions of ``packages`` and everything they require here (extras left out)."""
    from packaging.requirements import Requirement

    found: dict[str, metadata.Distribution] = {}
    todo = list(packages)
    while todo:
        name = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError as exc:
            raise ConfigError(f"the MCP server's runtime needs {name!r}, which is not installed here "
                              "(pip install 'agentspec[mcp]')") from exc
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in found:
            continue
        found[key] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return [found[key] for key in sorted(found)]


def _dist_files(dist: metadata.Distribution) -> list[tuple[Path, str]]:
    """(host file, path under site/) for each file the distribution installed into site-packages."""
    files = []
    for entry in dist.files or []:
        relative = str(entry)
        if relative.startswith(("..", "/")):  # console scripts and the like, outside site-packages
            continue
        path = Path(str(dist.locate_file(entry)))
        if path.is_file():
            files.append((path, relative))
    return files


def _inside(path: Path) -> str:
    return f"{FILES}{path}"


def _digest(base_id: str, command: str, dists: Sequence[metadata.Distribution], files: Iterable[Path]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"recipe": RECIPE_VERSION, "base": base_id, "command": command,
                         "abi": sysconfig.get_config_var("EXT_SUFFIX")}).encode())
    for dist in dists:
        h.update(f"\0{dist.metadata['Name']}=={dist.version}\0".encode())
        h.update((dist.read_text("RECORD") or "").encode())
    for path in sorted(set(files)):
        h.update(f"\0{path}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def runtime_image(api: docker.APIClient, base: str, command: str, args: Sequence[str], env: Mapping[str, str], *,
                  packages: Sequence[str] = ("mcp",), program: tuple[int, Path] | None = None) -> RuntimeImage:
    """Find or build the runtime image of the server ``command *args`` over the sandbox image ``base`` (see the
    module docstring); ``env``: the server's own variables; ``program``: the interpreter's program file on this
    host, as (its index in ``args``, its path) (:func:`agentspec.mcp._program_file`), the one file copied in:
    every other argument is the server's own, relative to its working directory in the container (the workspace).

    Blocking (call it through a worker thread).  ConfigError when the image cannot run the server: no
    ``python3``, another Python ABI than this one, or a command it does not have.
    """
    info = api.inspect_image(base)
    python = command in PYTHONS
    dists = _distributions(packages) if python else []
    files = dict([program]) if program is not None else {}
    digest = _digest(info["Id"], command, dists, files.values())
    tag = f"{RUNTIME_IMAGE}:{digest}"
    argv = ("python3" if python else command, *(_inside(files[i]) if i in files else a for i, a in enumerate(args)))
    variables = {**env, "PYTHONPATH": f"{SITE}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else SITE} \
        if python else dict(env)
    items = tuple(f"{key}={value}" for key, value in variables.items())
    try:
        api.inspect_image(tag)
        return RuntimeImage(tag=tag, argv=argv, env=items, built=False)
    except docker.errors.ImageNotFound:
        pass
    _check(base, _probe(api, base, info, argv[0]), command, python)
    _build(api, info["Id"], tag, digest, dists, files.values())
    return RuntimeImage(tag=tag, argv=argv, env=items, built=True)


def _probe(api: docker.APIClient, base: str, info: dict[str, Any], command: str) -> dict[str, Any]:
    """What Python the image has, and where ``command`` is in it (a throwaway container, no network)."""
    config = info.get("Config") or {}
    user = containers.check_user(config.get("User") or "1000:1000", base)
    volumes = containers.parse_mounts((config.get("Labels") or {}).get(MOUNTS))
    host_config = api.create_host_config(network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"],
                                         binds=volumes or None, read_only=True)
    container = api.create_container(info["Id"], command=["python3", "-I", "-S", "-c", PROBE, command], user=user,
                                     labels={LABEL: "1", OWNER: owner_tag()}, host_config=host_config)["Id"]
    try:
        try:
            api.start(container)
        except docker.errors.APIError as exc:
            raise ConfigError(f"the sandbox image {base} has no python3 to run the MCP server's probe: "
                              f"{_docker_reason(exc)}") from exc
        code = api.wait(container, timeout=60).get("StatusCode")
        out = api.logs(container, stdout=True, stderr=False).decode(errors="replace")
        if code != 0:
            err = api.logs(container, stdout=False, stderr=True).decode(errors="replace").strip()
            raise ConfigError(f"the sandbox image {base}'s python3 failed a probe: {err.splitlines()[-1:] or code}")
        found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return found
    finally:
        with suppress(docker.errors.NotFound):
            api.remove_container(container, force=True)


def _docker_reason(exc: docker.errors.APIError) -> str:
    text = str(getattr(exc, "explanation", None) or exc)
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__


def _check(base: str, probe: dict[str, Any], command: str, python: bool) -> None:
    """Refuse an image that cannot run the server (one line each)."""
    if not python:
        if probe.get("command") is None:
            raise ConfigError(f"the MCP server's command {command!r} is not in the sandbox image {base}: inside "
                              "Docker a server runs as python/python3 (with the MCP SDK copied in) or as a program "
                              "the image has")
        return
    host = sysconfig.get_config_var("EXT_SUFFIX")
    if probe.get("ext_suffix") != host:
        raise ConfigError(f"the sandbox image {base} has Python {probe.get('version')} ({probe.get('ext_suffix')}), "
                          f"but the MCP SDK copied into it is installed here for {host}: use an image whose python3 "
                          "matches the Python running agentspec")


def _build(api: docker.APIClient, base_id: str, tag: str, digest: str, dists: Sequence[metadata.Distribution],
           files: Iterable[Path]) -> None:
    """``FROM base`` plus ``/opt/agentspec-mcp`` (root-owned, read-only to the sandbox user), without network."""
    context = io.BytesIO()

    def root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = (info.mode & 0o755) | 0o444
        return info

    with tarfile.open(fileobj=context, mode="w") as tf:
        dockerfile = f"FROM {base_id}\nCOPY opt/ /opt/\n".encode()
        entry = tarfile.TarInfo("Dockerfile")
        entry.size = len(dockerfile)
        tf.addfile(entry, io.BytesIO(dockerfile))
        for dist in dists:
            for path, relative in _dist_files(dist):
                tf.add(path, arcname=f"{SITE}/{relative}".lstrip("/"), recursive=False, filter=root_owned)
        for path in files:
            tf.add(path, arcname=_inside(path).lstrip("/"), recursive=False, filter=root_owned)
    context.seek(0)
    output = api.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True, pull=False,
                       network_mode="none", labels={IMAGE: RUNTIME_IMAGE, "agentspec.digest": digest}, decode=True)
    for line in output:
        if "error" in line:
            raise SnapshotError(f"building the MCP runtime image {tag}: {str(line['error']).strip()[:300]}")


# --------------------------------------------------------------------------- the transport


async def _socket_stream(sock: Any) -> anyio.abc.SocketStream:
    """An anyio stream over the connection of an exec socket the Docker SDK returned (it keeps its own copy)."""
    raw = getattr(sock, "_sock", sock)
    if isinstance(raw, ssl.SSLSocket):
        raise ConfigError("an MCP server in Docker needs an engine reached by a Unix or plain TCP socket, not TLS")
    mine = raw.dup()  # the SDK's objects are closed at once; the connection lives on in this copy
    _release(sock)
    if mine.family == socket.AF_UNIX:
        return await anyio.abc.UNIXSocketStream.from_socket(mine)
    return await anyio.abc.SocketStream.from_socket(mine)


def _release(sock: Any) -> None:
    """Close the SDK's objects for an exec socket without shutting the connection down."""
    response = getattr(sock, "_response", None)
    if response is not None:
        response.close()
    sock.close()
    raw = getattr(sock, "_sock", None)
    if raw is not None:
        raw.close()


class _Frames:
    """The server's side of an exec connection: stdout lines out, stderr kept (its tail) for messages."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.buffered = BufferedByteReceiveStream(stream)
        self.stderr: deque[bytes] = deque()
        self.ended = anyio.Event()

    async def lines(self) -> AsyncIterator[bytes]:
        """Each line the server writes to stdout, until the exec ends (its connection closes)."""
        pending = b""
        try:
            while True:
                header = await self.buffered.receive_exactly(8)  # stream (1 stdout, 2 stderr), 0, 0, 0, size
                data = await self.buffered.receive_exactly(int.from_bytes(header[4:], "big"))
                if header[0] != 1:
                    self._keep(data)
                    continue
                *complete, pending = (pending + data).split(b"\n")
                for line in complete:
                    yield line
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError,
                OSError):
            return
        finally:
            self.ended.set()

    def _keep(self, data: bytes) -> None:
        self.stderr.append(data)
        while sum(map(len, self.stderr)) > STDERR_KEPT and len(self.stderr) > 1:
            self.stderr.popleft()

    def said(self) -> str:
        """The last line of stderr, or ''."""
        lines = b"".join(self.stderr).decode(errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else ""


def _parse(line: bytes) -> Any:
    """One stdout line as the SDK's message, or the parse error (the session reports it)."""
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter

    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


# --------------------------------------------------------------------------- a server's process


@asynccontextmanager
async def exec_transport(api: docker.APIClient, container: str, runtime: RuntimeImage, user: str,
                         kill: Callable[[], Awaitable[None]]) -> AsyncIterator[tuple[Any, Any]]:
    """The server as a process in ``container``, its stdio as the SDK's read and write streams.

    On exit its stdin is closed, it gets :data:`EXIT_GRACE_S` to exit, then ``kill`` kills every process of the
    sandbox user in the container: nothing else runs there (PID 1 excepted, which survives it; the next server
    over the same state starts only once this one is gone), and a child the server left, or the server itself
    when it did not exit, must not write into a state being committed.
    """

    def start() -> Any:
        exec_id = api.exec_create(container, list(runtime.argv), stdin=True, user=user, workdir=WORKSPACE,
                                  environment=list(runtime.env))["Id"]
        return api.exec_start(exec_id, socket=True)

    sock = await containers.call("starting the MCP server in its container", start)
    try:
        stream = await _socket_stream(sock)
    except BaseException:
        _release(sock)
        with anyio.CancelScope(shield=True):
            await kill()
        raise
    frames = _Frames(stream)
    try:
        async with stream, _streams(frames) as (read, write):
            try:
                yield read, write
            finally:
                read.close()  # the session is done with them: the pumps drain what the server still writes
                write.close()
                with anyio.CancelScope(shield=True):
                    await _end(frames, kill)
    except Exception as exc:
        said = frames.said()
        if said:  # a server that died (at start, most often) says why on its stderr
            raise EnvError(f"{_one_line(exc)}; the server wrote: {said}") from exc
        raise


async def _end(frames: _Frames, kill: Callable[[], Awaitable[None]]) -> None:
    """Close the server's stdin, give it a moment to exit, then kill what is left in its container."""
    with suppress(OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
        await frames.stream.send_eof()
    with anyio.move_on_after(EXIT_GRACE_S):
        await frames.ended.wait()
    await kill()
    with anyio.move_on_after(EXIT_GRACE_S):
        await frames.ended.wait()


def _one_line(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # the SDK's task groups wrap what they raise
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


@asynccontextmanager
async def _streams(frames: _Frames) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's (read, write) memory streams over an exec connection, pumped by two tasks."""
    from mcp.shared.message import SessionMessage

    read_send, read_recv = anyio.create_memory_object_stream[Any](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        async with read_send:
            async for line in frames.lines():  # to the end: a server writing to a closed session must not block
                with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    await read_send.send(_parse(line))

    async def writer() -> None:
        try:
            async with write_recv:
                async for message in write_recv:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await frames.stream.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_send.aclose()  # the session sees the connection end rather than a request hanging

    async with anyio.create_task_group() as group:
        group.start_soon(reader)
        group.start_soon(writer)
        try:
            yield read_recv, write_send
        finally:
            read_recv.close()
            write_send.close()
            group.cancel_scope.cancel()  # the caller has ended the exec (or given up on it)


def dev_image(client: docker.DockerClient) -> str:
    """The development sandbox image (``agentspec/sandbox/definitions/dev.toml``), built once or found by its content hash."""
    from agentspec.sandbox.images import ImageDefinition, build_image, find_definition

    return build_image(client, ImageDefinition.load(find_definition("dev"))).tag

