"""The Docker backend on a stock engine (overlay2 over ext4, the default almost everywhere), which cannot apply
``--storage-opt size``: the default limits still start, with the disk capped by a tmpfs workspace.

The engine is a private ``dockerd`` started for these tests (tests/sandbox_support.py, ``stock_docker_client``),
beside the one the other Docker tests use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sandbox_support import REPO, C, read_tree, stock_docker_client  # noqa: F401 - the stock engine fixture

import agentspec
from agentspec import RunSpec
from agentspec.errors import SnapshotError
from agentspec.sandbox.containers import disk_cap
from agentspec.sandbox.docker_backend import DockerBackend
from agentspec.sandbox.images import ImageDefinition, build_image
from agentspec.sandbox.program import Limits
from envs.gaia.bench import GaiaBench
from envs.workspace.environment import workspace_program

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

FIXTURES = Path(__file__).resolve().parent / "data" / "gaia-format"


@pytest.fixture(scope="module")
def stock_image(stock_docker_client: Any) -> str:  # noqa: F811 - the fixture imported above
    return build_image(stock_docker_client, ImageDefinition.load(REPO / "agentspec" / "sandbox" / "definitions" / "dev.toml")).tag


def test_the_engine_is_stock_and_refuses_storage_opt(stock_docker_client: Any, stock_image: str) -> None:  # noqa: F811
    info = stock_docker_client.info()
    backing = dict(info["DriverStatus"]).get("Backing Filesystem")
    assert info["Driver"] == "overlay2" and backing not in ("btrfs", "xfs"), (info["Driver"], backing)
    assert disk_cap(stock_docker_client.api, stock_image) == "tmpfs"


async def test_writing_more_than_the_cap_fails_inside_and_live_is_unaffected(
        stock_docker_client: Any, stock_image: str, tmp_path: Path) -> None:  # noqa: F811
    (tmp_path / "notes.txt").write_text("kept")
    limit = 16 * 2**20
    async with DockerBackend(workspace_program(), tmp_path, image=stock_image, client=stock_docker_client,
                             limits=Limits(disk_bytes=limit)) as backend:
        assert backend.disk_cap == "tmpfs" and backend.weakened is None  # no limit was dropped to start
        box = await backend.fork(await backend.snapshot())
        # Many files each under RLIMIT_FSIZE: only the file system's size stops them.
        full = await box.execute(C("run_python", code=(
            "import os\n"
            "written = 0\n"
            "try:\n"
            "    for i in range(8):\n"
            "        with open(f'f{i}', 'wb') as fh:\n"
            "            fh.write(b'x' * 4 * 2**20)\n"
            "        written += 4 * 2**20\n"
            "except OSError as exc:\n"
            "    print('stopped after', written, exc.strerror)\n")))
        assert "stopped after" in full.content and "No space left on device" in full.content, full.content
        assert int(full.content.split()[2]) <= limit
        outside = await box.execute(C("run_shell", command="echo x > /opt/x 2>&1; echo x > /x 2>&1; echo done"))
        assert outside.content.count("Read-only file system") == 2, outside.content  # nowhere else to write
        assert await read_tree(backend) == {"notes.txt": "kept"}
        assert (await backend.execute(C("write_file", path="more.txt", content="live"))).error is False
        assert await read_tree(backend) == {"notes.txt": "kept", "more.txt": "live"}



async def test_a_fork_of_sparse_or_countless_files_cannot_fill_the_host_with_its_snapshot(
        stock_docker_client: Any, stock_image: str, tmp_path: Path) -> None:  # noqa: F811
    # Sparse files (each under RLIMIT_FSIZE) take no room on the tmpfs but their full size in the workspace's tar
    # (a host file); empty files take none either, but a tar header each.
    (tmp_path / "notes.txt").write_text("kept")
    async with DockerBackend(workspace_program(), tmp_path, image=stock_image, client=stock_docker_client,
                             limits=Limits(disk_bytes=2**20), commit_mode="diff") as backend:
        assert backend.disk_cap == "tmpfs"
        sparse = await backend.fork(await backend.snapshot())
        made = await sparse.execute(C("run_shell", command="for i in $(seq 64); do truncate -s 1000000 s$i; done; echo ok"))
        assert made.content.strip().endswith("ok"), made.content
        with pytest.raises(SnapshotError, match="sparse files counted"):
            await backend.snapshot(sparse)
        with pytest.raises(SnapshotError, match="sparse files counted"):  # nor may it become live's workspace
            await backend.commit(sparse)
        empty = await backend.fork(await backend.snapshot())
        made = await empty.execute(C("run_python", code="for i in range(8000):\n    open(f'e{i}', 'w').close()\n"))
        assert made.error is False, made.content
        with pytest.raises(SnapshotError, match="workspace tar grew past"):
            await backend.snapshot(empty)
        assert await read_tree(backend) == {"notes.txt": "kept"}
        assert (await backend.execute(C("write_file", path="more.txt", content="live"))).error is False
        assert await read_tree(await backend.fork(await backend.snapshot())) == {"notes.txt": "kept", "more.txt": "live"}

def test_gaia_default_python_backend_runs_on_a_stock_engine(stock_docker_client: Any, stock_image: str) -> None:  # noqa: F811
    bench = GaiaBench.from_data_dir(FIXTURES)
    bench.sandbox_options.update(image=stock_image, client=stock_docker_client)
    assert bench.sandbox == "docker"
    spec = RunSpec.of(agent="oracle", modes="sa", speculator_model="noisy-oracle:1.0", task_ids=["ours-0012"],
                      latency_model="smc-paper", progress=False)
    episode = agentspec.run(spec, bench=bench).episodes["sa"][0]
    assert episode.reward == 1.0 and (episode.execution or {})["metrics"]["speculative_tool_calls"] > 0
