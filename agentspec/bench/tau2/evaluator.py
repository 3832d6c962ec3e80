"""The tau2 evaluator: environment assertions on a replayed trajectory and action checks (pass^k: :func:`agentspec.results.pass_hat_k`).

Reward is 0 unless the episode ended with an agent or user stop; otherwise
it is the product over the task's ``reward_basis`` of

* ``ENV_ASSERTION``: replay every recorded tool call, in order and with its
  requestor, on a fresh environment after the task's initialisation; every
  replayed output must equal the recorded one (else :class:`ReplayMismatch`);
  then every assertion must hold;
* ``ACTION``: every gold action is matched by some call of either party with
  the same name and matching arguments (``compare_args`` rule below).  The
  actions are checked whatever the basis (as tau2 reports them), and count
  only where it names ``ACTION``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, Field

from agentspec.errors import EnvError, ReplayMismatch
from agentspec.types import Message, Observation, Requestor, TerminationReason, ToolCall, Trajectory

SCORED_ENDINGS = (TerminationReason.AGENT_STOP, TerminationReason.USER_STOP)


class Check(BaseModel):
    """One scored check and whether it passed."""

    kind: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    passed: bool


class Evaluation(BaseModel):
    reward: float
    termination: TerminationReason | None
    reward_basis: list[str]
    env_assertions: list[Check] = Field(default_factory=list)
    actions: list[Check] = Field(default_factory=list)
    note: str | None = None


class ReplayEnvironment(Protocol):
    def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation: ...

    def sync(self) -> None: ...

    def run_function(self, env_type: Any, func_name: str, arguments: dict[str, Any]) -> Any: ...


class Assertion(Protocol):
    env_type: Any
    func_name: str
    arguments: dict[str, Any]
    assert_value: bool


class GoldAction(Protocol):
    name: str
    arguments: dict[str, Any]
    compare_args: list[str] | None


def _parsed(content: str | None) -> Any:
    try:
        return json.loads(content or "")
    except json.JSONDecodeError:
        return content


def replay(env: ReplayEnvironment, trajectory: Trajectory) -> None:
    """Re-execute every recorded call on ``env`` and insist on identical outputs."""
    recorded = {m.tool_call_id: m for m in trajectory.messages if m.role == "tool"}
    for requestor, call in trajectory.tool_calls():
        observation = env.execute(call, requestor)
        original: Message | None = recorded.get(call.id)
        if original is None:
            continue  # a call the episode never executed (e.g. dropped by a solo `done`)
        if _parsed(original.content) != _parsed(observation.content):
            raise ReplayMismatch(
                f"replaying {call.name}({json.dumps(call.arguments)}) gave {observation.content!r}, "
                f"the episode recorded {original.content!r}"
            )
    env.sync()


def check_assertions(env: ReplayEnvironment, assertions: Sequence[Assertion]) -> list[Check]:
    checks = []
    for assertion in assertions:
        result = env.run_function(assertion.env_type, assertion.func_name, assertion.arguments)
        if not isinstance(result, bool):
            raise EnvError(f"assertion {assertion.func_name} returned {result!r}, not a boolean")
        checks.append(
            Check(kind="env", name=assertion.func_name, arguments=assertion.arguments, passed=result == assertion.assert_value)
        )
    return checks


def arguments_match(gold: GoldAction, call: ToolCall) -> bool:
    """tau2's rule: ``compare_args=None`` compares on the predicted call's keys, ``[]`` on the name only."""
    if call.name != gold.name:
        return False
    keys = list(call.arguments) if gold.compare_args is None else gold.compare_args
    predicted = {key: call.arguments.get(key) for key in keys}
    expected = {key: gold.arguments.get(key) for key in keys}
    return predicted == expected


def check_actions(trajectory: Trajectory, gold_actions: Sequence[GoldAction]) -> list[Check]:
    calls = [call for _, call in trajectory.tool_calls()]
    return [
        Check(kind="action", name=gold.name, arguments=gold.arguments, passed=any(arguments_match(gold, c) for c in calls))
        for gold in gold_actions
    ]


def evaluate(
    trajectory: Trajectory,
    *,
    fresh_environment: Callable[[], ReplayEnvironment],
    assertions: Sequence[Assertion],
    gold_actions: Sequence[GoldAction],
    reward_basis: Sequence[str],
) -> Evaluation:
    """Score one episode.  ``fresh_environment`` must return the task's initialised environment."""
    env_checks: list[Check] = []
    if "ENV_ASSERTION" in reward_basis:
        env = fresh_environment()
        replay(env, trajectory)
        env_checks = check_assertions(env, assertions)
    # Every gold action is checked, as tau2 does, whether or not the reward counts them (its basis says).
    action_checks = check_actions(trajectory, gold_actions)
    counted = action_checks if "ACTION" in reward_basis else []
    reward = float(all(c.passed for c in env_checks) and all(c.passed for c in counted))
    note = None
    if trajectory.termination not in SCORED_ENDINGS:
        reward = 0.0
        note = f"episode ended with {trajectory.termination.value if trajectory.termination else 'no termination'}"
    return Evaluation(
        reward=reward,
        termination=trajectory.termination,
        reward_basis=list(reward_basis),
        env_assertions=env_checks,
        actions=action_checks,
        note=note,
    )
