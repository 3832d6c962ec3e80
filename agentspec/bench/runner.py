"""Run many episodes concurrently with a progress bar; tell a dead model endpoint from failed episodes.

A mode's figures are :func:`agentspec.results.summarize`'s."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import anyio

from agentspec.errors import ModelError, ModelRequestError, ModelTimeout, ModelUnavailable

Job = TypeVar("Job")


class EpisodeLike(Protocol):
    # Read-only (properties): an Episode computes its reward, and nothing here writes them.
    @property
    def task_id(self) -> str: ...

    @property
    def reward(self) -> float: ...

    @property
    def error(self) -> str | None: ...

    def record(self) -> dict[str, Any]: ...


async def run_jobs(
    jobs: Sequence[Job],
    run_one: Callable[[Job], Awaitable[EpisodeLike]],
    *,
    concurrency: int = 1,
    progress: bool = True,
    label: str = "episodes",
) -> list[EpisodeLike]:
    """Run ``run_one`` over ``jobs`` with at most ``concurrency`` in flight; results keep job order."""
    # rich is only for the progress bar: importing it here keeps ``import agentspec`` (which reaches this module
    # through the assembly) from loading it.
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    results: list[EpisodeLike | None] = [None] * len(jobs)
    limiter = anyio.CapacityLimiter(max(1, concurrency))
    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("reward {task.fields[mean]:.3f}"),
        TimeElapsedColumn(), console=Console(stderr=True), transient=False, disable=not progress,
    )
    rewards: list[float] = []

    async def worker(index: int, job: Job, bar_id: Any) -> None:
        async with limiter:
            episode = await run_one(job)
        results[index] = episode
        rewards.append(episode.reward)
        bar.update(bar_id, advance=1, mean=sum(rewards) / len(rewards))

    with bar:
        bar_id = bar.add_task(label, total=len(jobs), mean=0.0)
        async with anyio.create_task_group() as group:
            for index, job in enumerate(jobs):
                group.start_soon(worker, index, job, bar_id)
    return [r for r in results if r is not None]


def _endpoint_error_names() -> set[str]:
    # Unreachable, timed out, or refused (4xx/5xx): the endpoint failed.  ModelOutputError is left out: there the
    # endpoint answered and the model's output was unusable, which is the model's score, not a dead endpoint.
    pending: list[type[ModelError]] = [ModelUnavailable, ModelTimeout, ModelRequestError]
    names = set()
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    return names


def endpoint_failure(error: str | None) -> bool:
    """Whether an episode's ``error`` ("ModelUnavailable: ...") is a failure of a model endpoint."""
    return bool(error) and error.partition(":")[0] in _endpoint_error_names()  # type: ignore[union-attr]


def raise_if_endpoint_dead(episodes: Sequence[EpisodeLike]) -> None:
    """A run in which every episode failed on a model endpoint is a dead endpoint: exit 2 with its answer.

    Results are written before this is called, so the failed episodes stay inspectable.
    """
    if episodes and all(endpoint_failure(e.error) for e in episodes):
        first = str(episodes[0].error).splitlines()[0]
        raise ModelUnavailable(f"all {len(episodes)} episode(s) failed on the model endpoint; first: {first}")
