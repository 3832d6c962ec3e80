"""Helpers shared by the sandbox tests: calls, reading a whole tree through tools, the Docker engine.

The Docker engine is found through ``DOCKER_HOST`` or the default socket.  When
none answers and this process may start one (root, ``dockerd`` installed), a
private ``dockerd`` on a temporary data root is started for the session and
stopped at its end, so ``pytest`` alone runs the Docker tests for real.  Only
when no engine can be had are they skipped, with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentspec.types import ToolCall

REPO = Path(__file__).resolve().parents[1]


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


def _start_dockerd() -> tuple[subprocess.Popen[bytes], Path] | None:
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        return None
    root = Path(tempfile.mkdtemp(prefix="agentspec-test-dockerd-"))
    sock = root / "docker.sock"
    log = (root / "dockerd.log").open("wb")
    process = subprocess.Popen(
        ["dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "exec"), "-H", f"unix://{sock}",
         "--pidfile", str(root / "dockerd.pid"), "--bridge=none", "--iptables=false", "--ip-forward=false"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        if sock.exists():
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
    from agentspec.sandbox._docker import connect

    started = None
    try:
        client = connect()
    except SnapshotError as first:
        started = _start_dockerd()
        if started is None:
            pytest.skip(f"no Docker engine: {first} (and no dockerd could be started here)")
        try:
            client = _wait_for_engine()
        except SnapshotError as exc:
            _stop(started)
            pytest.skip(f"no Docker engine: started dockerd did not answer: {exc}")
    try:
        yield client
    finally:
        client.close()
        if started is not None:
            _stop(started)


def _wait_for_engine() -> Any:
    from agentspec.errors import SnapshotError
    from agentspec.sandbox._docker import connect

    deadline = time.monotonic() + 30
    while True:
        try:
            return connect()
        except SnapshotError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def _stop(started: tuple[subprocess.Popen[bytes], Path]) -> None:
    process, root = started
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    os.environ.pop("DOCKER_HOST", None)
    subprocess.run(["umount", "-R", "-l", str(root)], stderr=subprocess.DEVNULL, check=False)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def dev_image(docker_client: Any) -> str:
    """The fast development image (envs/sandboxes/dev.toml), built or found by its content hash."""
    from agentspec.sandbox.images import ImageDefinition, build_image

    return build_image(docker_client, ImageDefinition.load(REPO / "envs" / "sandboxes" / "dev.toml")).tag


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
