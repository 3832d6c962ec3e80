"""The driver side of ``agentspec run --ray``: :class:`RayStrategy`, a batch's episodes as Ray tasks, streamed
back into the local run.

:func:`agentspec.batch.run_mode` runs a mode with it as with the local strategy and returns the same episodes in
the same job order, so ``results.json``, the summary and the progress bar do not change::

    spec = RunSpec.of(bench="tau2-telecom", split="small", agent="oracle", modes="sa", out="runs/x",
                      speculator_model="noisy-oracle:0.8", latency_model="smc-paper", cluster="127.0.0.1:6379")
    outcome = run(spec)            # each episode is a Ray task; runs/x/run-sa.log.jsonl as in a local run

Each task needs one CPU, plus one unit of the custom resource ``docker`` when its environment is not in process
(a Docker-backed bench): start the nodes that have a Docker engine with ``ray start --resources '{"docker": N}'``.
A task that loses its worker is retried by Ray (up to :data:`MAX_RETRIES` times) and resumes from its part log
(:mod:`agentspec.cluster.parts`); the driver merges each finished part into the run log, so every result
appears there exactly once.  With a cluster, the number of episodes in flight is the cluster's CPUs (or
``docker`` slots), not ``--concurrency``.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from agentspec.batch import Job, ModeRun, Play, Result, job_key, prior_log
from agentspec.bench.protocol import Bench
from agentspec.cluster.parts import clear_parts, merge_finished, merge_part, part_path
from agentspec.cluster.worker import EpisodeJob, play_episode
from agentspec.errors import AgentSpecError, ClusterError, ConfigError
from agentspec.run_spec import RunSpec
from agentspec.runtime.runlog.replay import TaskLog
from agentspec.runtime.runlog.writer import RunLog

DEFAULT_ADDRESS = "default"
"""``RunSpec.cluster`` for a bare ``--ray``: the cluster ``RAY_ADDRESS`` (or a running local one) names, else a
new one on this machine."""
MAX_RETRIES = 3
"""Attempts Ray makes after the first when a task's worker dies."""
POLL_S = 0.2
"""How long the driver's thread waits for finished tasks before checking again (wall time)."""
PROBE_S = 3.0
"""How long the driver waits for the cluster's GCS port to accept a TCP connection before giving up."""
LOOPBACK_NODE_IP = "127.0.0.2"
"""The node address of a cluster kept on this machine's loopback.  Not 127.0.0.1: Ray takes ``localhost``,
``127.0.0.1`` and ``::1`` to mean "this machine" and swaps in its outward address (``ray start
--node-ip-address 127.0.0.1`` listens there), which may not answer; any other 127.x address stays as given."""
CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")
"""Where ``ray start --head`` writes the address of the cluster a bare ``ray.init()`` joins."""



def episode_resources(spec: RunSpec, bench: Bench[Any]) -> dict[str, Any]:
    """What one episode asks Ray for: a CPU, and a ``docker`` slot when its environment runs outside the process.

    >>> episode_resources(RunSpec(), type("B", (), {"in_process": False})())
    {'num_cpus': 1, 'resources': {'docker': 1}}
    """
    needs_engine = spec.backend == "docker" or not bench.in_process
    return {"num_cpus": 1, "resources": {"docker": 1} if needs_engine else {}}


def check_spec(spec: RunSpec, solo: bool) -> None:
    """Refuse what a cluster run cannot do: ConfigError saying what to do instead (``solo``: whether the run
    plays without a user simulator, as it decided)."""
    from agentspec.roles import plan_roles, run_roles

    if spec.record:
        raise ConfigError("--record writes one recording from one process: record without --ray, then replay with it")
    if spec.verify_macros:
        raise ConfigError("--verify-macros updates one macro library as episodes run: run it without --ray")
    if spec.replay is None and plan_roles(spec, run_roles(spec, solo)).embedded:
        raise ConfigError("with --ray every model must be an endpoint the workers can reach: name them with "
                          "--agent-model / --user-model / --speculator-model URL (local models are not served on workers)")


def _split(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``ray://`` and IPv6 brackets allowed) -> (host, port); ConfigError otherwise."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--ray ADDRESS must be HOST:PORT (the head node's GCS port), not {address!r}")
    return host, int(port)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def probe(address: str, timeout_s: float = PROBE_S) -> str:
    """The address of this machine that reaches the cluster at ``address`` (its GCS port answered a TCP
    connect within ``timeout_s``): the node address the driver gives Ray, so Ray tries no other one of this
    machine's addresses.  ConfigError in seconds when nothing answers there."""
    host, port = _split(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            local = str(conn.getsockname()[0])
    except OSError as exc:
        why = exc.strerror or type(exc).__name__  # a timeout has no strerror
        raise ConfigError(f"cannot reach the Ray cluster at {address}: nothing answers there ({why}); start one "
                          f"with `ray start --head --port {port}` or give its address (--ray HOST:PORT)") from None
    # On this machine's loopback the node is at the GCS's own address (a connect from 127.0.0.1 to 127.0.0.2
    # reports 127.0.0.1, which Ray would replace with the outward address).
    return host if _is_loopback(host) else local


def _default_address() -> str | None:
    """What a bare ``--ray`` joins: ``RAY_ADDRESS``, else the cluster ``ray start --head`` last started here
    (None: none, so the run starts its own)."""
    named = os.environ.get("RAY_ADDRESS", "").strip()
    if named and named not in ("auto", "local"):
        return named
    if named != "local" and CURRENT_CLUSTER.is_file():
        return CURRENT_CLUSTER.read_text().strip() or None
    return None


def connect(address: str) -> Any:
    """The ``ray`` module, connected to ``address`` (:data:`DEFAULT_ADDRESS`: ``RAY_ADDRESS`` or the cluster
    running here, else a new one on this machine's loopback); ConfigError when Ray is missing or, within
    seconds, when nothing answers at the cluster's address."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray: pip install 'agentspec[ray]'") from None
    if ray.is_initialized():
        return ray
    target = _default_address() if address == DEFAULT_ADDRESS else address
    # Before ray.init: Ray itself waits minutes for a GCS that is not there, then tries other addresses.
    node_ip = probe(target) if target is not None else LOOPBACK_NODE_IP
    # A Ray Client (ray://) driver is no node of the cluster: it has no node address to give.
    node: dict[str, Any] = {} if (target or "").startswith("ray://") else {"_node_ip_address": node_ip}
    try:
        ray.init(address=target, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False, **node)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"cannot reach the Ray cluster at {target or 'a new local cluster'}: "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; start one with "
                          "`ray start --head` or give its address (--ray HOST:PORT)") from exc
    return ray


def _check_feasible(ray: Any, resources: dict[str, Any]) -> None:
    """Fail at once (not hang) when no node offers what an episode needs."""
    offered = ray.cluster_resources()
    for name, amount in resources["resources"].items():
        if offered.get(name, 0) < amount:
            raise ConfigError(f"no node of the Ray cluster offers the {name!r} resource these episodes need: start a "
                              f"node that has a Docker engine with ray start --resources '{{\"{name}\": 4}}'")


class _Waiter:
    """One thread waits on every task at once (``ray.wait``) and wakes the job whose result came."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        self.pending: dict[Any, anyio.Event] = {}
        self.done: dict[Any, Any] = {}

    def submit(self, ref: Any) -> None:
        self.pending[ref] = anyio.Event()

    async def result(self, ref: Any) -> Any:
        await self.pending[ref].wait()
        return self.done.pop(ref)

    async def run(self) -> None:
        while any(not event.is_set() for event in self.pending.values()):
            waiting = [ref for ref, event in self.pending.items() if not event.is_set()]
            ready, _ = await anyio.to_thread.run_sync(functools.partial(
                self.ray.wait, waiting, num_returns=len(waiting), timeout=POLL_S, fetch_local=True))
            for ref in ready:
                self.done[ref] = await anyio.to_thread.run_sync(self._get, ref)
                self.pending[ref].set()

    def _get(self, ref: Any) -> Any:
        try:
            return self.ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - handed to the job that owns the task, which raises it
            return exc


def _raise_for(error: BaseException, key: str) -> None:
    """Re-raise an episode's own error (a ReplayMiss, a ConfigError) as itself; the cluster's as ClusterError."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, AgentSpecError):
        raise cause
    first = str(error).splitlines()[0] if str(error) else ""
    raise ClusterError(f"task {key!r} failed on the Ray cluster (a task whose worker dies is retried {MAX_RETRIES} "
                       f"times): {type(error).__name__}: {first}") from error


class RayStrategy:
    """Each episode of a batch a Ray task on the cluster ``spec.cluster`` names (a
    :class:`~agentspec.batch.Strategy`): every job submitted at once (Ray queues what the cluster cannot run yet),
    each logged by its worker to its own part, merged into the mode's run log as it finishes."""

    def __init__(self) -> None:
        self.ray: Any = None
        self.resources: dict[str, Any] = {}

    def in_flight(self, run: ModeRun, jobs: Sequence[Job]) -> int:
        return max(1, len(jobs))  # the cluster's CPUs (or docker slots) bound what runs, not --concurrency

    def prior(self, run: ModeRun, jobs: Sequence[Job]) -> dict[str, TaskLog]:
        """Refuse what a cluster cannot do and connect (before the log is touched), then ready the log."""
        check_spec(run.spec, run.solo)
        self.ray = connect(run.spec.cluster or DEFAULT_ADDRESS)
        self.resources = episode_resources(run.spec, run.bench)
        _check_feasible(self.ray, self.resources)
        return _prepare_log(run, jobs)

    @asynccontextmanager
    async def playing(self, run: ModeRun, todo: Sequence[tuple[Job, TaskLog | None]]) -> AsyncIterator[Play]:
        ray, out = self.ray, run.spec.out
        holder = [ray.put(run)]
        remote = ray.remote(play_episode).options(max_retries=MAX_RETRIES, retry_exceptions=False, **self.resources)
        waiter = _Waiter(ray)
        refs: dict[str, Any] = {}
        for (task, trial), logged in todo:
            key = job_key((task, trial))
            part = str(part_path(out, run.mode.name, key)) if out else None
            refs[key] = remote.remote(holder, EpisodeJob(task, trial, part, logged))
            waiter.submit(refs[key])

        async def play(job: Job, resumed: TaskLog | None) -> Result:
            key = job_key(job)
            episode = await waiter.result(refs[key])
            if isinstance(episode, BaseException):
                _raise_for(episode, key)
            path = run.log_path
            if path is not None and out:
                part = part_path(out, run.mode.name, key)
                if part.is_file():
                    merge_part(part, path)
            return episode

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(waiter.run)
                yield play
        except BaseException:
            _cancel(ray, [ref for ref, event in waiter.pending.items() if not event.is_set()])
            raise


def _cancel(ray: Any, refs: list[Any]) -> None:
    """Stop the tasks of a run that stopped (an error, Ctrl-C), so no worker keeps writing its part: a later
    ``--resume`` continues each from its log."""
    for ref in refs:
        try:
            ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001, S112 - a task that already ended cannot be cancelled; nothing to do
            continue


def _prepare_log(run: ModeRun, jobs: Sequence[Job]) -> dict[str, TaskLog]:
    """The run log's tasks for a resumed run (after merging parts a stopped driver left finished), checked as a
    local run checks them (:func:`~agentspec.batch.prior_log`: settings, and each of ``jobs`` whose data changed is
    refused); a fresh run starts from an empty log and no parts."""
    spec, mode, path = run.spec, run.mode, run.log_path
    if path is None:
        return {}
    if not spec.resume:
        prior_log(spec, mode, [])  # an earlier run's log is refused unless --overwrite
        path.unlink(missing_ok=True)
        clear_parts(spec.out or "", mode.name)
        RunLog(path, run.log_config()).close()  # the header, as a local run writes it
        return {}
    # A run killed before its header was whole left no log to resume: start one with this run's settings, as a fresh
    # run does, so the parts merged into it are not left under a header that records none (refused by a resume).
    RunLog(path, run.log_config()).close()  # writes the header only into an empty log
    merge_finished(spec.out or "", mode.name, path)
    return prior_log(spec, mode, jobs)
