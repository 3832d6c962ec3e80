"""Cost of the snapshot protocol on real sandboxes: snapshot, fork, execute, commit, discard.

For each backend (overlay, copy, Docker with promotion and with diff commits,
SQLite) and each state size (a tree of 64 KiB files, or a SQLite table of
blobs, of 1 MB, 50 MB and 500 MB), one repetition is::

    live call that writes      (so the next snapshot has something to freeze)
    snapshot                   of live
    fork                       of that snapshot
    execute                    a 1 KB write inside the fork (a full call: process start, confinement)
    commit                     of the fork (one small file changed)
    discard                    of a second fork with one small change
    commit_10mb                of a fork that wrote 10 MB (promotion vs diff)

and the figure is the median over the repetitions, in milliseconds.  Source
trees live on tmpfs (/dev/shm): deleting big trees on / is slow.  Prints one
JSON object.

    python experiments/sandbox_cost.py [--sizes 1,50,500] [--backends overlay,copy,docker,docker-diff,sqlite]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from agentspec.errors import SnapshotError
from agentspec.sandbox.docker_backend import DockerBackend
from agentspec.sandbox.overlay import OverlayBackend
from agentspec.sandbox.program import Limits
from agentspec.sandbox.sqlite_backend import SqliteBackend
from agentspec.types import ToolCall
from envs.workspace.environment import workspace_program

REPO = Path(__file__).resolve().parents[1]
FILE = 64 * 1024


def write(path: str, size: int) -> ToolCall:
    return ToolCall(name="write_file", arguments={"path": path, "content": "x" * size})


def make_tree(root: Path, megabytes: int) -> Path:
    count = max(1, megabytes * 2**20 // FILE)
    block = os.urandom(FILE)
    for i in range(count):
        path = root / f"d{i % 64:02d}" / f"f{i:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(block)
    return root


def make_database(path: Path, megabytes: int) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, data BLOB)")
        conn.execute("CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)")
        block = os.urandom(FILE)
        conn.executemany("INSERT INTO blobs (data) VALUES (?)", ((block,) for _ in range(max(1, megabytes * 2**20 // FILE))))
    conn.close()
    return path


async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await fn()
    return (time.perf_counter() - started) * 1000, result


async def measure(backend: Any, repeats: int, sql: bool) -> dict[str, float]:
    small = (lambda i: ToolCall(name="sql_execute", arguments={"sql": f"INSERT OR REPLACE INTO kv VALUES ('k', '{i}')"})) if sql else (
        lambda i: write(f"small{i}.txt", 1024)
    )
    big = ToolCall(name="sql_execute", arguments={"sql": "INSERT INTO blobs (data) VALUES (randomblob(10485760))"}) if sql else write(
        "big.bin", 10 * 2**20
    )
    samples: dict[str, list[float]] = {k: [] for k in ("snapshot", "snapshot_unchanged", "fork", "execute", "commit", "discard", "commit_10mb")}
    for i in range(repeats):
        await backend.execute(small(i))
        ms, snap = await timed(backend.snapshot)
        samples["snapshot"].append(ms)
        samples["snapshot_unchanged"].append((await timed(backend.snapshot))[0])
        ms, box = await timed(lambda snap=snap: backend.fork(snap))
        samples["fork"].append(ms)
        samples["execute"].append((await timed(lambda box=box, i=i: box.execute(small(i))))[0])
        samples["commit"].append((await timed(lambda box=box: backend.commit(box)))[0])
        other = await backend.fork(await backend.snapshot())
        await other.execute(small(i))
        samples["discard"].append((await timed(lambda other=other: backend.discard(other)))[0])
        heavy = await backend.fork(await backend.snapshot())
        await heavy.execute(big)
        samples["commit_10mb"].append((await timed(lambda heavy=heavy: backend.commit(heavy)))[0])
    return {key: round(statistics.median(values), 2) for key, values in samples.items()}


async def run_one(kind: str, megabytes: int, scratch: Path, repeats: int, image: str | None) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(dir=scratch))
    try:
        if kind == "sqlite":
            path = await anyio.to_thread.run_sync(make_database, folder / "db.sqlite", megabytes)
            started = time.perf_counter()
            async with SqliteBackend(path) as backend:
                start_ms = (time.perf_counter() - started) * 1000
                result = await measure(backend, repeats, sql=True)
            return {"start": round(start_ms, 2), **result}
        source = await anyio.to_thread.run_sync(make_tree, folder / "src", megabytes)
        backend: Any
        if kind in ("overlay", "copy"):
            # Copy mode holds a full copy per fork: room for the largest tree's forks (the disk limit is
            # measured by the tests, not here).
            roomy = Limits(disk_bytes=16 * 2**30)
            backend = OverlayBackend(workspace_program(), source, mode=kind, scratch=scratch, limits=roomy)
        else:
            assert image is not None
            backend = DockerBackend(workspace_program(), source, image=image, commit_mode="diff" if kind == "docker-diff" else "promote")
        started = time.perf_counter()
        async with backend:
            start_ms = (time.perf_counter() - started) * 1000
            extra = {"isolation": backend.isolation}
            result = await measure(backend, repeats, sql=False)
        return {"start": round(start_ms, 2), **extra, **result}
    finally:
        await anyio.to_thread.run_sync(shutil.rmtree, folder)


def docker_image() -> tuple[str | None, str | None]:
    """The dev image's tag, or why Docker is skipped."""
    from agentspec.sandbox.containers import connect
    from agentspec.sandbox.images import ImageDefinition, build_image

    try:
        client = connect()
    except SnapshotError as exc:
        return None, str(exc)
    try:
        return build_image(client, ImageDefinition.load(REPO / "agentspec" / "sandbox" / "definitions" / "dev.toml")).tag, None
    finally:
        client.close()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="agentspec-cost-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    kinds = args.backends.split(",")
    image, why = docker_image() if any(k.startswith("docker") for k in kinds) else (None, None)
    results: dict[str, Any] = {}
    try:
        for kind in kinds:
            results[kind] = {}
            for megabytes in (int(s) for s in args.sizes.split(",")):
                if kind.startswith("docker") and image is None:
                    results[kind] = {"skipped": why}
                    break
                repeats = args.repeats if megabytes < 500 else max(1, args.repeats // 2)
                print(f"{kind} {megabytes} MB ...", file=sys.stderr, flush=True)
                results[kind][f"{megabytes}MB"] = await run_one(kind, megabytes, scratch, repeats, image)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    goals = {}
    if "overlay" in results and results["overlay"]:
        goals["overlay_fork_ms_max"] = max(r["fork"] for r in results["overlay"].values())
        goals["overlay_fork_under_20ms"] = goals["overlay_fork_ms_max"] < 20
    if isinstance(results.get("docker"), dict) and "skipped" not in results["docker"]:
        goals["docker_fork_ms_max"] = max(r["fork"] for r in results["docker"].values())
        goals["docker_fork_under_1s"] = goals["docker_fork_ms_max"] < 1000
    return {
        "unit": "ms (median)",
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
        "tree": f"{FILE // 1024} KiB files; sqlite: a table of {FILE // 1024} KiB blobs",
        "results": results,
        "goals": goals,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,50,500", help="state sizes in MB")
    parser.add_argument("--backends", default="overlay,copy,docker,docker-diff,sqlite")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(anyio.run(main_async, args)))


if __name__ == "__main__":
    main()
