"""Episodes per minute on a Ray cluster with 1, 2 and 4 workers, and the per-episode overhead Ray adds.

Every run plays the same episodes: tau2-telecom tasks with the oracle agent and a noisy-oracle speculator
(``--mode sa``) on trio's virtual clock, so an episode costs only CPU (the executor, the environment, the run
log), never a model.  For each worker count a fresh single-node cluster is started with ``ray start --head
--num-cpus N`` (one episode per CPU slot), warmed up with 4N episodes (each worker process starts cold: imports,
the bench's data), then timed; the local run (no Ray, same process, warmed up with one episode) is the baseline.  The per-episode overhead is (1-worker wall - local wall) / episodes.

Prints progress to stderr and, as the last stdout line, one JSON object::

    python experiments/ray_scaling.py --split small --trials 2 --workers 1,2,4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentspec.pipeline import run
from agentspec.run_spec import RunSpec

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tau2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def head_node(cpus: int) -> Iterator[str]:
    """A one-node Ray cluster with ``cpus`` worker slots, stopped (its process group) on exit; its address."""
    temp = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths have a length limit
    port = _free_port()
    command = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", "--port", str(port),
               "--num-cpus", str(cpus), "--object-store-memory", "100000000", "--include-dashboard=false",
               "--disable-usage-stats", "--temp-dir", str(temp / "t")]
    with (temp / "node.log").open("wb") as log:
        node = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while "ray start --address" not in (temp / "node.log").read_text(errors="replace"):
            if node.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"ray start failed:\n{(temp / 'node.log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.3)
        yield f"127.0.0.1:{port}"
    finally:
        import ray

        ray.shutdown()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(node.pid, sig)
                node.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(temp, ignore_errors=True)


def _spec(args: argparse.Namespace, out: Path, **extra: Any) -> RunSpec:
    return RunSpec.of(bench="tau2-telecom", data_dir=str(args.data), split=args.split, limit=args.limit,
                      trials=args.trials, agent="oracle", modes="sa", speculator_model="noisy-oracle:0.8",
                      latency_model="smc-paper", progress=False, out=str(out), **extra)


def _timed(spec: RunSpec) -> tuple[float, int, float]:
    """Wall seconds of the run, its episodes, and their mean simulated (virtual) seconds."""
    started = time.perf_counter()
    outcome = run(spec)
    wall = time.perf_counter() - started
    episodes = outcome.modes["sa"].episodes
    simulated = [e.record()["timings"]["simulated_wall_s"] for e in episodes]
    return wall, len(episodes), sum(simulated) / len(simulated)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--split", default="small")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--workers", default="1,2,4")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="ray-scaling-"))
    figures: dict[str, Any] = {}
    try:
        run(_spec(args, scratch / "warm-local").model_copy(update={"limit": 1, "trials": 1}))  # imports, data
        wall, episodes, simulated = _timed(_spec(args, scratch / "local"))
        figures["local"] = {"wall_s": round(wall, 3), "episodes": episodes,
                            "episodes_per_min": round(episodes / wall * 60, 1), "mean_simulated_s": round(simulated, 3)}
        print(f"local: {figures['local']}", file=sys.stderr)
        for workers in [int(w) for w in args.workers.split(",")]:
            with head_node(workers) as address:
                # Every worker process starts cold (imports, the bench's data): warm them before timing.
                warm = _spec(args, scratch / f"warm-{workers}", cluster=address)
                warm_wall = _timed(warm.model_copy(update={"limit": 4 * workers, "trials": 1}))[0]
                wall, episodes, simulated = _timed(_spec(args, scratch / f"ray-{workers}", cluster=address))
            figures[f"ray_{workers}"] = {"workers": workers, "wall_s": round(wall, 3), "episodes": episodes,
                                         "warmup_wall_s": round(warm_wall, 3), "warmup_episodes": 4 * workers,
                                         "episodes_per_min": round(episodes / wall * 60, 1),
                                         "mean_simulated_s": round(simulated, 3)}
            print(f"ray {workers}: {figures[f'ray_{workers}']}", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    local, one = figures["local"], figures.get("ray_1")
    summary = {
        "bench": "tau2-telecom", "split": args.split, "mode": "sa", "agent": "oracle",
        "speculator": "noisy-oracle:0.8", "latency_model": "smc-paper", "clock": "virtual", "cpus": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "runs": figures,
        "ray_overhead_per_episode_ms": round((one["wall_s"] - local["wall_s"]) / one["episodes"] * 1000, 1) if one else None,
        "speedup_vs_ray_1": {k: round(v["episodes_per_min"] / one["episodes_per_min"], 2)
                             for k, v in figures.items() if k.startswith("ray_")} if one else None,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
