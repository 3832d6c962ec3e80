"""Docker backend specifics: hardened containers, enforced limits, flattening, cleanup, image builds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from sandbox_support import REPO, SPAWN_200, C, read_tree, unavailable

from agentspec.cli import main
from agentspec.sandbox.containers import BACKEND, OWNER, disk_cap, sweep
from agentspec.sandbox.docker_backend import DockerBackend
from agentspec.sandbox.program import Limits
from envs.workspace.environment import workspace_program

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


def _backend(client: Any, image: str, source: Path | None = None, **options: Any) -> DockerBackend:
    return DockerBackend(workspace_program(), source, image=image, client=client, **options)


async def test_containers_are_locked_down(docker_client: Any, dev_image: str) -> None:
    limits = Limits(memory_bytes=300 * 2**20, cpus=0.5, pids=50)
    async with _backend(docker_client, dev_image, limits=limits) as backend:
        box = await backend.fork(await backend.snapshot())
        for container in (backend.live_container, box.container_id):
            info = docker_client.api.inspect_container(container)
            host = info["HostConfig"]
            assert host["NetworkMode"] == "none"
            assert host["Memory"] == 300 * 2**20 and host["MemorySwap"] == 300 * 2**20
            assert host["NanoCpus"] == 500_000_000 and host["PidsLimit"] == 50
            assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
            assert info["Config"]["User"] == "1000:1000"
            assert info["Config"]["Labels"][OWNER] and info["Config"]["Labels"][BACKEND]
        inside = await box.execute(
            C("run_shell", command="id -u; cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/memory/memory.limit_in_bytes "
              "2>/dev/null || cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/memory.max; touch /usr/x 2>&1; grep CapEff /proc/self/status")
        )  # fmt: skip
        lines = inside.content.splitlines()
        assert lines[0] == "1000"
        assert "50000" in lines[1] and str(300 * 2**20) in lines[2]
        assert "Read-only file system" in inside.content or "Permission denied" in inside.content
        assert "CapEff:\t0000000000000000" in inside.content


async def test_pids_limit_is_enforced(docker_client: Any, dev_image: str) -> None:
    async with _backend(docker_client, dev_image, limits=Limits(pids=40)) as backend:
        obs = await backend.execute(C("run_python", code=SPAWN_200))
        assert "refused after" in obs.content, obs.content
        assert int(obs.content.split()[2]) < 40
        # ... and every one of those processes died with the call.
        assert "sleep 60" not in (await backend.execute(C("run_shell", command="cat /proc/[0-9]*/cmdline | tr '\\0' ' '"))).content


async def test_memory_limit_is_enforced(docker_client: Any, dev_image: str) -> None:
    async with _backend(docker_client, dev_image, limits=Limits(memory_bytes=128 * 2**20)) as backend:
        obs = await backend.execute(C("run_python", code="block = bytearray(400 * 2**20)\nprint('allocated')"))
        assert "allocated" not in obs.content
        assert "killed by signal 9" in obs.content or "died" in obs.content, obs.content
        ok = await backend.execute(C("run_python", code="block = bytearray(30 * 2**20)\nprint('allocated')"))
        assert ok.content.strip() == "allocated"


async def test_deep_histories_are_flattened(docker_client: Any, dev_image: str, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("base")
    async with _backend(docker_client, dev_image, tmp_path, max_layers=3) as backend:
        for i in range(5):
            box = await backend.fork(await backend.snapshot())
            await box.execute(C("write_file", path=f"f{i}.txt", content=str(i)))
            await box.execute(C("delete_path", path="a.txt" if i == 0 else f"f{i - 1}.txt"))
            await backend.commit(box)
        layers = docker_client.api.inspect_image(docker_client.api.inspect_container(backend.live_container)["Image"])
        assert len(layers["RootFS"]["Layers"]) <= 3
        assert await read_tree(backend) == {"f4.txt": "4"}


async def test_close_removes_every_container_and_image(docker_client: Any, dev_image: str) -> None:
    backend = _backend(docker_client, dev_image)
    await backend.start()
    label = f"{BACKEND}={backend._id}"
    snap = await backend.snapshot()
    box = await backend.fork(snap)
    await box.execute(C("write_file", path="x.txt", content="x"))
    await backend.fork(await backend.snapshot(box))
    assert len(docker_client.api.containers(filters={"label": label})) == 3
    await backend.close()
    assert docker_client.api.containers(all=True, filters={"label": label}) == []
    assert docker_client.api.images(all=True, filters={"label": label}) == []


async def test_a_cancelled_fork_leaves_no_container(docker_client: Any, dev_image: str) -> None:
    import anyio

    async with _backend(docker_client, dev_image) as backend:
        label = f"{BACKEND}={backend._id}"
        snap = await backend.snapshot()
        made = []
        for delay in (0.0, 0.05, 0.2):
            with anyio.move_on_after(delay):
                made.append(await backend.fork(snap))
        # Only the live container and forks that finished before their deadline exist.
        assert len(docker_client.api.containers(all=True, filters={"label": label})) == 1 + len(made)
        box = await backend.fork(snap)
        assert (await box.execute(C("run_shell", command="echo fine"))).content.strip() == "fine"


CHILD = """
import anyio, sys
sys.path[:0] = [{repo!r}]
from agentspec.sandbox.docker_backend import DockerBackend
from envs.workspace.environment import workspace_program
from agentspec.types import ToolCall

async def main():
    backend = DockerBackend(workspace_program(), None, image=sys.argv[1])
    await backend.start()
    box = await backend.fork(await backend.snapshot())
    await box.execute(ToolCall(name="write_file", arguments={{"path": "x", "content": "x"}}))
    await backend.snapshot(box)
    print("ready", flush=True)
    await anyio.sleep(600)

anyio.run(main)
"""


def test_leftovers_of_a_killed_process_are_swept(docker_client: Any, dev_image: str, tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(repo=str(REPO)))
    child = subprocess.Popen([sys.executable, str(script), dev_image], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    api = docker_client.api

    def left(kind: str) -> list[Any]:
        found = api.containers(all=True, filters={"label": OWNER}) if kind == "containers" else api.images(all=True, filters={"label": OWNER})
        return [item for item in found if f":{child.pid}:" in item["Labels"][OWNER]]

    # Live, fork and the images survive the kill: 2 snapshots, or (tmpfs workspaces, whose snapshots are tars in
    # anonymous files that died with the process) the seed image ...
    images = 2 if disk_cap(api, dev_image) == "storage-opt" else 1
    assert len(left("containers")) == 2 and len(left("images")) == images
    swept = sweep(api)
    assert swept["containers"] >= 2 and swept["images"] >= images  # ... until the next start sweeps them
    assert left("containers") == [] and left("images") == []


def test_build_command_caches_by_content_hash(docker_client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sandbox", "build", "dev"]) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["images"][0]
    assert main(["sandbox", "build", str(REPO / "agentspec" / "sandbox" / "definitions" / "dev.toml")]) == 0
    second = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["images"][0]
    assert second["cached"] and second["id"] == first["id"] and second["tag"].startswith("agentspec-dev:")


async def test_debootstrap_image_is_hermetic(docker_client: Any, tmp_path: Path) -> None:
    """``agentspec sandbox build bookworm``: Debian's own python3, no host directory mounted in."""
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        unavailable("building the hermetic image needs debootstrap, as root: apt-get install debootstrap")
    assert main(["sandbox", "build", "bookworm"]) == 0
    (tmp_path / "hello.py").write_text("print('hello from bookworm')")
    async with _backend(docker_client, "agentspec-bookworm:latest", tmp_path) as backend:
        info = docker_client.api.inspect_container(backend.live_container)
        assert info["Mounts"] == []
        obs = await backend.execute(C("run_shell", command="python3 hello.py; grep VERSION_CODENAME /etc/os-release"))
        assert obs.content.splitlines() == ["hello from bookworm", "VERSION_CODENAME=bookworm"]


async def test_disk_limit_is_enforced(docker_client: Any, dev_image: str) -> None:
    """20 MB: a bigger file, or files that add up to more, fail inside; the writable layer (or the tmpfs workspace
    of an engine that cannot cap it) stays under it."""
    limit = 20 * 2**20
    async with _backend(docker_client, dev_image, limits=Limits(disk_bytes=limit)) as backend:
        box = await backend.fork(await backend.snapshot())
        host = docker_client.api.inspect_container(box.container_id)["HostConfig"]
        assert backend.isolation["disk_cap"] == backend.disk_cap == disk_cap(docker_client.api, dev_image)
        if backend.disk_cap == "storage-opt":
            assert host["StorageOpt"] == {"size": str(limit)}
        else:
            assert host["ReadonlyRootfs"] and host["Tmpfs"]["/workspace"].startswith(f"size={limit},")
        one = await box.execute(C("run_shell", command="dd if=/dev/zero of=big bs=1M count=30 2>&1"))
        assert any(why in one.content for why in ("File size limit exceeded", "Disk quota exceeded")), one.content
        # Files that only add up to more: in a fresh fork (btrfs frees a deleted file's extents only at its next
        # transaction), flushed to disk, so the quota is charged before the call ends.
        box = await backend.fork(await backend.snapshot())
        # Either the engine's quota stops the writes, or the backend's check after the call fails it.
        many = await box.execute(C("run_shell", command="for i in 1 2 3; do dd if=/dev/zero of=f$i bs=1M count=15 conv=fsync 2>&1; done"))
        url = docker_client.api._url("/containers/{0}/json", box.container_id)
        size = docker_client.api._result(docker_client.api._get(url, params={"size": 1}), True)["SizeRw"]
        if size > limit:
            assert many.error and f"over its disk limit of {limit}" in many.content, many.content
            again = await box.execute(C("write_file", path="more.txt", content="x"))
            assert again.error and "disk limit" in again.content  # and so does every later writing call
        else:
            assert "Disk quota exceeded" in many.content or "No space left" in many.content, many.content


async def test_an_engine_that_cannot_cap_the_disk_is_refused(docker_client: Any, dev_image: str) -> None:
    """The refusal names the cause and the way out; ``disk_bytes=None`` is the reported opt-out."""
    from agentspec.errors import SnapshotError
    from agentspec.sandbox import containers

    refusal = docker.errors.APIError("--storage-opt is supported only for overlay over xfs with 'pquota' mount option")
    assert containers.is_disk_limit_refusal(refusal)
    assert "Limits(disk_bytes=None)" in str(containers.disk_limit_error(refusal))
    async with _backend(docker_client, dev_image, limits=Limits(disk_bytes=None, pids=None)) as backend:
        host = docker_client.api.inspect_container(backend.live_container)["HostConfig"]
        assert not host.get("StorageOpt") and backend.weakened == "no-pids-limit,no-disk-limit"
        assert backend.isolation["disk_bytes"] is None
        assert (await backend.execute(C("run_shell", command="echo ok"))).isolation == "no-pids-limit,no-disk-limit"
    with pytest.raises(SnapshotError):
        raise containers.disk_limit_error(refusal)


@pytest.mark.parametrize("commit_mode", ["promote", "diff"])
async def test_a_tmpfs_workspace_carries_its_state_through_snapshots_forks_and_commits(
        docker_client: Any, dev_image: str, tmp_path: Path, commit_mode: str) -> None:
    """The cap every engine can give (read-only root, tmpfs /workspace): ``docker commit`` does not see a tmpfs,
    so the backend carries the workspace itself; what a fork writes stays there until committed, and writing more
    than the cap fails inside the fork without touching live."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("base")
    (tmp_path / "src" / "old.txt").write_text("old")
    limit = 20 * 2**20
    async with _backend(docker_client, dev_image, tmp_path / "src", limits=Limits(disk_bytes=limit),
                        disk_cap="tmpfs", commit_mode=commit_mode) as backend:
        assert backend.isolation["disk_cap"] == "tmpfs" and await read_tree(backend) == {"a.txt": "base", "old.txt": "old"}
        box = await backend.fork(await backend.snapshot())
        await box.execute(C("write_file", path="d/b.txt", content="fork"))
        await box.execute(C("delete_path", path="old.txt"))
        child = await backend.fork(await backend.snapshot(box))  # a fork of a fork: the tar of a tar
        assert await read_tree(child) == {"a.txt": "base", "d/b.txt": "fork"}
        full = await box.execute(C("run_shell", command=f"dd if=/dev/zero of=big bs=1M count={limit // 2**20 + 5} 2>&1"))
        assert "No space left on device" in full.content or "File size limit exceeded" in full.content, full.content
        await box.execute(C("delete_path", path="big"))
        assert await read_tree(backend) == {"a.txt": "base", "old.txt": "old"}  # live never saw the fork's writes
        await backend.commit(box)
        assert await read_tree(backend) == {"a.txt": "base", "d/b.txt": "fork"}
        again = await backend.fork(await backend.snapshot())
        assert await read_tree(again) == {"a.txt": "base", "d/b.txt": "fork"}
        # Files that only add up to more than the cap: the kernel stops the one that crosses it.
        many = await again.execute(C("run_shell", command="for i in 1 2 3; do dd if=/dev/zero of=f$i bs=1M count=8 2>&1; done"))
        assert "No space left on device" in many.content, many.content
        assert await read_tree(backend) == {"a.txt": "base", "d/b.txt": "fork"}
