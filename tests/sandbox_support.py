"""Helpers shared by the sandbox tests: calls, reading a whole tree through tools, the Docker engine.

The Docker engine is found through ``DOCKER_HOST`` or the default socket.  When
none answers and this process may start one (root, ``dockerd`` installed), a
private ``dockerd`` is started for the session and stopped at its end, so
``pytest`` alone runs the Docker tests for real; its data root is a btrfs file
system on a loop device when ``mkfs.btrfs`` is installed, so the Docker
backend caps each container's disk with ``--storage-opt size``.  The tests of
tests/test_docker_stock.py take :func:`stock_docker_client` instead: a second
private ``dockerd`` as most machines run it (overlay2 over ext4), which cannot
do that and gets the backend's other cap (a tmpfs workspace).

A test that needs what the host cannot give (bubblewrap, an engine, a disk cap,
debootstrap) skips with the exact reason and how to install it, through
:func:`unavailable`; with ``AGENTSPEC_REQUIRE_ISOLATION=1`` (``.ci/run`` sets
it) the same test fails instead, so CI never passes on skipped isolation tests.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import docker.errors
import pytest
import requests

from agentspec.errors import SnapshotError
from agentspec.types import ToolCall

REPO = Path(__file__).resolve().parents[1]
REQUIRE_ISOLATION = "AGENTSPEC_REQUIRE_ISOLATION"


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason``; fail with it instead when ``AGENTSPEC_REQUIRE_ISOLATION=1``."""
    if os.environ.get(REQUIRE_ISOLATION) == "1":
        pytest.fail(f"{reason} [{REQUIRE_ISOLATION}=1: this test must run here]", pytrace=False)
    pytest.skip(reason)


@functools.cache
def bwrap_problem() -> str | None:
    """Why the overlay/copy backends cannot start here (the backend's own message), or None."""
    import anyio

    from agentspec.errors import SnapshotError
    from envs.workspace.environment import open_workspace

    async def start() -> None:
        # A whole start with the default limits: besides bubblewrap, a user who is not root is refused the
        # scratch tmpfs (the disk limit), and the tests that start a backend need both.
        async with open_workspace("copy"):
            pass

    def probe() -> str | None:
        try:
            anyio.run(start)
        except SnapshotError as exc:
            return str(exc)
        return None

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # callable from inside a running event loop
        return pool.submit(probe).result()


def require_bwrap() -> None:
    """Skip (or fail, see :func:`unavailable`) unless bubblewrap works here."""
    problem = bwrap_problem()
    if problem is not None:
        unavailable(problem)


@pytest.fixture
def needs_bwrap() -> None:
    """For tests that start an overlay or copy backend (they need bubblewrap)."""
    require_bwrap()


def C(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


async def read_tree(target: Any) -> dict[str, str]:
    """Every file of a workspace (live backend or sandbox) as {path: content}, through read-only tools.

    Files hold one non-empty line each in these tests, so ``grep '^'`` shows them whole.
    """
    listing = await target.execute(C("list_files", recursive=True))
    assert not listing.error, listing.content
    paths = [line for line in listing.content.splitlines() if line]
    if not paths:
        return {}
    found = await target.execute(C("grep", pattern="^", max_matches=100_000))
    assert not found.error, found.content
    tree = {}
    for line in found.content.splitlines():
        path, _, rest = line.partition(":")
        _, _, text = rest.partition(":")
        tree[path] = text
    assert sorted(tree) == sorted(paths), (tree, paths)
    return tree


def _btrfs_data_root(root: Path) -> Path:
    """A btrfs file system on a sparse loop file (lets dockerd cap a container's disk), else a plain folder."""
    data = root / "data"
    data.mkdir()
    if shutil.which("mkfs.btrfs") is None:
        return data
    image = root / "data.img"
    with image.open("wb") as fh:
        fh.truncate(20 * 2**30)
    made = subprocess.run(["mkfs.btrfs", "-q", str(image)], capture_output=True, check=False)
    if made.returncode == 0:
        subprocess.run(["mount", "-o", "loop", str(image), str(data)], capture_output=True, check=False)
    return data


def _ext4_data_root(root: Path) -> Path:
    """ext4 on a sparse loop file: a stock engine's overlay2 whatever file system holds /tmp (else a plain folder)."""
    data = root / "data"
    data.mkdir()
    image = root / "data.img"
    with image.open("wb") as fh:
        fh.truncate(8 * 2**30)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, check=False)
    if made.returncode == 0:
        subprocess.run(["mount", "-o", "loop", str(image), str(data)], capture_output=True, check=False)
    return data


def _start_dockerd(stock: bool = False) -> tuple[subprocess.Popen[bytes], Path] | None:
    """A private dockerd (btrfs data root; ``stock``: overlay2 over ext4, and DOCKER_HOST left alone)."""
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        return None
    root = Path(tempfile.mkdtemp(prefix="agentspec-test-dockerd-"))
    sock = root / "docker.sock"
    data = _ext4_data_root(root) if stock else _btrfs_data_root(root)
    driver = ["--storage-driver", "overlay2"] if stock else []
    log = (root / "dockerd.log").open("wb")
    process = subprocess.Popen(
        ["dockerd", "--data-root", str(data), "--exec-root", str(root / "exec"), "-H", f"unix://{sock}",
         "--pidfile", str(root / "dockerd.pid"), "--bridge=none", "--iptables=false", "--ip-forward=false", *driver],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        if sock.exists():
            if not stock:
                os.environ["DOCKER_HOST"] = f"unix://{sock}"
            return process, root
        time.sleep(0.2)
    process.kill()
    process.wait()
    return None


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A client of a running engine (see the module docstring), or a skip saying why there is none."""
    from agentspec.errors import SnapshotError
    from agentspec.sandbox.containers import connect

    started = None
    try:
        client = connect()
    except SnapshotError as first:
        started = _start_dockerd()
        if started is None:
            unavailable(f"no Docker engine: {first} (and no dockerd could be started here: apt-get install docker.io)")
        try:
            client = _wait_for_engine()
        except SnapshotError as exc:
            _stop(started)
            unavailable(f"no Docker engine: started dockerd did not answer: {exc}")
    try:
        yield client
    finally:
        client.close()
        if started is not None:
            _stop(started)


@pytest.fixture(scope="session")
def stock_docker_client() -> Iterator[Any]:
    """A client of a private engine on overlay2 over ext4, which cannot apply ``--storage-opt size``."""
    import docker

    started = _start_dockerd(stock=True)
    if started is None:
        unavailable("a stock Docker engine is started here as root with dockerd: apt-get install docker.io")
    try:
        client = _wait_for_engine(lambda: docker.DockerClient(base_url=f"unix://{started[1] / 'docker.sock'}", timeout=120))
    except SnapshotError as exc:
        _stop(started, exported=False)
        unavailable(f"the stock dockerd did not answer: {exc}")
    try:
        yield client
    finally:
        client.close()
        _stop(started, exported=False)


def _wait_for_engine(make: Callable[[], Any] | None = None) -> Any:
    """A client that answered (``make``: how to get one; default ``connect()``)."""
    from agentspec.sandbox.containers import connect

    deadline = time.monotonic() + 30
    while True:
        try:
            client = (make or connect)()
            client.ping()
            return client
        except (SnapshotError, docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            if time.monotonic() > deadline:
                raise SnapshotError(str(exc)) from exc
            time.sleep(0.3)


def _stop(started: tuple[subprocess.Popen[bytes], Path], exported: bool = True) -> None:
    process, root = started
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if exported:
        os.environ.pop("DOCKER_HOST", None)
    # The data root is the mount point (not ``root``): lazily, with what dockerd mounted under it.
    subprocess.run(["umount", "-R", "-l", str(root / "data")], stderr=subprocess.DEVNULL, check=False)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def dev_image(docker_client: Any) -> str:
    """The fast development image (agentspec/sandbox/definitions/dev.toml), built or found by its content hash.

    Skips (see :func:`unavailable`) when the engine can cap a container's disk in no way (neither
    ``--storage-opt size`` nor a tmpfs workspace): every Docker backend with the default limits
    would refuse to start there.
    """
    from agentspec.errors import SnapshotError
    from agentspec.sandbox.containers import disk_cap
    from agentspec.sandbox.images import ImageDefinition, build_image

    tag = build_image(docker_client, ImageDefinition.load(REPO / "agentspec" / "sandbox" / "definitions" / "dev.toml")).tag
    try:
        disk_cap(docker_client.api, tag)
    except SnapshotError as exc:
        unavailable(str(exc))
    return tag


def host_processes(marker: str) -> list[int]:
    """PIDs on this host whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(entry.name))
    return found


PROCESS_LIST = (
    "import os\n"
    "for pid in sorted(os.listdir('/proc')):\n"
    "    if pid.isdigit():\n"
    "        try:\n"
    "            print(open('/proc/%s/cmdline' % pid, 'rb').read().replace(b'\\0', b' ').decode())\n"
    "        except OSError:\n"
    "            pass\n"
)
"""A program printing every process's command line visible in its PID namespace."""


SPAWN_200 = (  # a program that starts 200 processes and says how many it got before the pids limit refused one
    "import subprocess\n"
    "children = []\n"
    "try:\n"
    "    for _ in range(200):\n"
    "        children.append(subprocess.Popen(['sleep', '60']))\n"
    "except OSError as exc:\n"
    "    print('refused after', len(children), type(exc).__name__)\n"
)


SECRET = "the-run-log-key-0123456789abcdef"
"""The run-log key the ``home`` fixture's cache holds: what no jail may read."""
