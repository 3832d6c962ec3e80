"""Run many episodes concurrently with a progress bar, then summarise them."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import anyio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentspec.bench.tau2.evaluator import pass_hat_k

Job = TypeVar("Job")


class EpisodeLike(Protocol):
    task_id: str
    reward: float
    error: str | None

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


def summarize(episodes: Sequence[EpisodeLike], wall_s: float) -> dict[str, Any]:
    """The run's headline numbers: reward mean, pass^k, how episodes ended."""
    per_task: dict[str, list[float]] = defaultdict(list)
    for episode in episodes:
        per_task[episode.task_id].append(episode.reward)
    successes = [(len(r), sum(1 for x in r if abs(x - 1.0) < 1e-6)) for r in per_task.values()]
    records = [e.record() for e in episodes]
    return {
        "tasks": len(per_task),
        "episodes": len(episodes),
        "reward_mean": sum(e.reward for e in episodes) / len(episodes) if episodes else 0.0,
        "pass_hat_k": {str(k): v for k, v in pass_hat_k(successes).items()},
        "terminations": dict(Counter(str(r["termination"]) for r in records)),
        "failed_episodes": sum(1 for e in episodes if e.error),
        "first_error": next((e.error for e in episodes if e.error), None),
        "wall_s": round(wall_s, 3),
    }
