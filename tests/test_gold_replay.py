"""Gold replay through the executor (sequential mode, as ``agentspec evaluate`` plays) scores 1.0; doing nothing
scores 0."""

from __future__ import annotations

import anyio
import pytest

from agentspec.cli.commands.evaluate import play_script
from agentspec.types import TerminationReason


async def _oracle_rewards(bench, tasks):
    rewards = {}
    for task in tasks:
        episode = await play_script(bench, task, bench.gold_actions(task), solo=True)
        assert episode.error is None, episode.error
        assert episode.trajectory.termination is TerminationReason.AGENT_STOP
        rewards[task.id] = episode.reward
    return rewards


def _failures(rewards):
    return {task_id: r for task_id, r in rewards.items() if r != 1.0}


def test_gold_replay_scores_one_on_every_base_task(bench):
    tasks = bench.tasks("base")
    assert len(tasks) == 114
    assert _failures(anyio.run(_oracle_rewards, bench, tasks)) == {}


@pytest.mark.full
def test_gold_replay_scores_one_on_all_tasks(bench):
    tasks = bench.tasks("full")
    assert len(tasks) == 2285
    assert _failures(anyio.run(_oracle_rewards, bench, tasks)) == {}


async def _do_nothing(bench, tasks, solo):
    rewards = {}
    for task in tasks:
        episode = await play_script(bench, task, [], end="assistant", solo=solo)
        rewards[task.id] = episode.reward
    return rewards


@pytest.mark.parametrize("solo", [True, False])
def test_doing_nothing_scores_zero_on_every_base_task(bench, solo):
    rewards = anyio.run(_do_nothing, bench, bench.tasks("base"), solo)
    assert set(rewards.values()) == {0.0}


def test_normal_mode_gold_replay_with_user_calls(bench):
    """Gold actions made by their real requestors (agent and user) also score 1.0."""
    from agentspec.types import ToolCall

    async def go():
        rewards = []
        for task in bench.tasks("small"):
            calls = [(a.requestor, ToolCall(name=a.name, arguments=a.arguments)) for a in task.evaluation_criteria.actions]
            episode = await play_script(bench, task, calls, end="user", solo=False)
            assert episode.trajectory.termination is TerminationReason.USER_STOP
            rewards.append(episode.reward)
        return rewards

    assert anyio.run(go) == [1.0] * 20
