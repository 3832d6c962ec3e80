"""tau2-telecom as a benchmark: tasks, environments, parties, episodes and scores."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentspec.bench.tau2.evaluator import Evaluation, evaluate
from agentspec.bench.tau2.orchestrator import AGENT_STOP_TOKEN, DONE_TOOL, Orchestrator, Party
from agentspec.bench.tau2.parties import LLMParty, Script, ScriptedParty
from agentspec.errors import AgentSpecError
from agentspec.macros import MacroLibrary
from agentspec.models import ModelClient
from agentspec.runtime.executor import CommittedStep, ExecutionLoop, ExecutorConfig
from agentspec.runtime.latency import LatencyModel
from agentspec.runtime.policies import Policy
from agentspec.runtime.probe import Prober
from agentspec.runtime.spork import SporkConfig
from agentspec.runtime.runlog import RunLog, TaskLog
from agentspec.snapshot import InProcessBackend
from agentspec.types import InvalidToolCall, Message, Requestor, TerminationReason, ToolCall, ToolSpec, Trajectory
from envs.tau2_telecom.dataset import Task, TelecomData
from envs.tau2_telecom.environment import TelecomEnvironment

AGENT_INSTRUCTIONS = (
    "You are a customer service agent for a telecom carrier. Help the user according to the policy below. "
    "In each turn either send a message to the user or make tool calls, not both. "
    "Follow the policy and the technical support manual exactly."
)
SOLO_INSTRUCTIONS = (
    "You are a telecom technical support agent working a ticket on your own: there is no user to talk to. "
    "You can operate both the carrier systems and the customer's phone with your tools. Every turn must be a tool "
    "call. Follow the policy and the manual, and call `done` once the ticket is resolved or handed over."
)


@dataclass
class Episode:
    """One finished episode with its score."""

    task_id: str
    trial: int
    trajectory: Trajectory
    evaluation: Evaluation | None
    timings: dict[str, float]
    error: str | None = None
    execution: dict[str, Any] | None = None
    """Speculative-executor details (mode, metrics, committed step sources, timeline) when one ran."""

    @property
    def reward(self) -> float:
        return self.evaluation.reward if self.evaluation else 0.0

    def record(self) -> dict[str, Any]:
        """The JSON record written to results.json."""
        evaluation = self.evaluation.model_dump(mode="json") if self.evaluation else None
        return {
            "task_id": self.task_id,
            "trial": self.trial,
            "reward": self.reward,
            "termination": self.trajectory.termination.value if self.trajectory.termination else None,
            "steps": self.trajectory.steps,
            "num_errors": self.trajectory.num_errors,
            "tool_calls": len(self.trajectory.tool_calls()),
            "evaluation": evaluation,
            "timings": self.timings,
            "error": self.error,
            "execution": self.execution,
            "messages": [m.model_dump(mode="json", exclude_defaults=True) for m in self.trajectory.messages],
        }


class TelecomBench:
    """Everything needed to run and score tau2-telecom tasks from one data folder."""

    name = "tau2-telecom"

    def __init__(self, data: TelecomData, *, max_steps: int = 200, max_errors: int = 10) -> None:
        self.data = data
        self.max_steps, self.max_errors = max_steps, max_errors

    @classmethod
    def from_data_dir(cls, data_dir: str | Path | None = None, **kwargs: Any) -> TelecomBench:
        return cls(TelecomData.locate(data_dir), **kwargs)

    def tasks(self, split: str = "base", task_ids: list[str] | None = None, limit: int | None = None) -> list[Task]:
        return self.data.select(split, task_ids, limit)

    def task(self, task_id: str) -> Task:
        return self.data.select(task_ids=[task_id])[0]

    # --- environments ------------------------------------------------------------

    def environment(self, task: Task, *, solo: bool = False) -> TelecomEnvironment:
        """A fresh environment with the task's initialisation applied (each action followed by a sync)."""
        env = TelecomEnvironment.from_dir(self.data.telecom, solo=solo)
        for action in task.initial_state.initialization_actions:
            env.run_function(action.env_type, action.func_name, action.arguments)
        env.sync()
        return env

    def evaluate(self, task: Task, trajectory: Trajectory, *, solo: bool = False) -> Evaluation:
        criteria = task.evaluation_criteria
        return evaluate(
            trajectory,
            fresh_environment=lambda: self.environment(task, solo=solo),
            assertions=criteria.env_assertions,
            gold_actions=criteria.actions,
            reward_basis=criteria.reward_basis,
        )

    # --- parties -----------------------------------------------------------------

    def agent_prompt(self, task: Task, *, solo: bool) -> str:
        manual = self.data.text("telecom/tech_support_manual.md")
        if solo:
            policy = self.data.text("telecom/main_policy_solo.md")
            return f"{SOLO_INSTRUCTIONS}\n\n<policy>\n{policy}\n\n{manual}\n</policy>\n\n<ticket>\n{task.ticket}\n</ticket>"
        policy = self.data.text("telecom/main_policy.md")
        return f"{AGENT_INSTRUCTIONS}\n\n<policy>\n{policy}\n\n{manual}\n</policy>"

    def user_prompt(self, task: Task) -> str:
        guidelines = self.data.text("user_simulator/simulation_guidelines_tools.md")
        return f"{guidelines}\n\n<scenario>\n{task.scenario_text()}\n</scenario>"

    def oracle(self, task: Task, *, solo: bool = True) -> tuple[Party, Party | None]:
        """Parties that replay the task's gold actions (the agent makes every call in solo mode)."""
        calls = [(a.requestor, ToolCall(name=a.name, arguments=a.arguments)) for a in task.evaluation_criteria.actions]
        return self.scripted(calls, end="assistant", solo=solo)

    def scripted(
        self, calls: Sequence[tuple[Requestor, ToolCall]], *, end: Requestor = "assistant", solo: bool = False
    ) -> tuple[Party, Party | None]:
        script = Script.of(calls, end=end, solo=solo)
        user = None if solo else ScriptedParty("user", script)
        return ScriptedParty("assistant", script), user

    def llm_parties(
        self, task: Task, agent: ModelClient, user: ModelClient | None, *, solo: bool, env: TelecomEnvironment
    ) -> tuple[Party, Party | None]:
        if solo:
            tools = env.tool_specs("assistant") + [DONE_TOOL]
            return LLMParty("assistant", agent, self.agent_prompt(task, solo=True), tools, tool_choice="required"), None
        if user is None:
            raise AgentSpecError("normal mode needs a user model (--user-model) or --solo")
        agent_party = LLMParty("assistant", agent, self.agent_prompt(task, solo=False), env.tool_specs("assistant"))
        user_party = LLMParty("user", user, self.user_prompt(task), env.tool_specs("user"))
        return agent_party, user_party

    # --- episodes ----------------------------------------------------------------

    async def run_episode(
        self, task: Task, agent: Party, user: Party | None, *, env: TelecomEnvironment, trial: int = 0
    ) -> Episode:
        """Play one episode with the given parties and score it; failures are recorded, not raised."""
        started = time.perf_counter()
        orchestrator = Orchestrator(task.id, env, agent, user, max_steps=self.max_steps, max_errors=self.max_errors)
        error = None
        evaluation = None
        try:
            trajectory = await orchestrator.run()
            eval_started = time.perf_counter()
            evaluation = self.evaluate(task, trajectory, solo=env.solo)
            orchestrator.timings["eval_s"] = time.perf_counter() - eval_started
        except AgentSpecError as exc:
            error = f"{type(exc).__name__}: {exc}"
        timings = {**orchestrator.timings, "wall_s": time.perf_counter() - started}
        return Episode(task.id, trial, orchestrator.trajectory, evaluation, timings, error)

    # --- speculative execution (solo mode) -------------------------------------------

    def distractors(self) -> list[ToolCall]:
        """Plausible calls for a noisy speculator to get wrong: every distinct gold call, plus checks."""
        seen: dict[str, ToolCall] = {}
        for task in self.data.tasks().values():
            for action in task.evaluation_criteria.actions:
                call = ToolCall(name=action.name, arguments=action.arguments)
                seen.setdefault(call.canonical(), call)
        for name in ("check_status_bar", "check_network_status", "run_speed_test", "check_apn_settings"):
            seen.setdefault(name, ToolCall(name=name))
        return [seen[key] for key in sorted(seen)]

    def value_patterns(self) -> list[tuple[str, str, str | None]]:
        """Task-specific values for macro mining: (slot type, value regex, argument-name regex or None).

        The carrier's id formats (``C1001``, ``L1002``, ``B1234321``, ``D1001``,
        ``P1001``), its phone numbers and dates, and amounts under amount-like
        argument names (``gb_amount``, ``data_used_gb``).
        """
        return [
            ("customer_id", r"C\d{4,}", None),
            ("line_id", r"L\d{4,}", None),
            ("bill_id", r"B\d{4,}", None),
            ("device_id", r"D\d{4,}", None),
            ("plan_id", r"P\d{4,}", None),
            ("phone_number", r"\d{3}-\d{3}-\d{4}", None),
            ("date", r"\d{4}-\d{2}-\d{2}", None),
            ("amount", r"-?\d+(\.\d+)?", r"amount|_gb$"),
            ("person_name", r".+", r"^full_name$"),
        ]

    def gold_calls(self, task: Task) -> list[ToolCall]:
        return [ToolCall(name=a.name, arguments=a.arguments, id=f"gold_{i}") for i, a in enumerate(task.evaluation_criteria.actions)]

    def solo_tools(self) -> list[ToolSpec]:
        env = TelecomEnvironment.from_dir(self.data.telecom, solo=True)
        return env.tool_specs("assistant") + [DONE_TOOL]

    async def run_speculative_episode(
        self,
        task: Task,
        authority: Policy,
        speculator: Policy | None,
        *,
        config: ExecutorConfig,
        macros: MacroLibrary | None = None,
        latency: LatencyModel | None = None,
        log: RunLog | None = None,
        resumed: TaskLog | None = None,
        trial: int = 0,
        prober: Prober | None = None,
        spork: SporkConfig | None = None,
    ) -> Episode:
        """One solo episode through the speculative executor, scored like any other."""
        started = time.perf_counter()
        backend = InProcessBackend(self.environment(task, solo=True))
        executor = ExecutionLoop(
            backend, authority, speculator, config=config, macros=macros, latency=latency, log=log,
            task_id=f"{task.id}#{trial}", prober=prober, spork=spork,
        )
        if resumed is not None:
            executor.resume(resumed)  # a log that cannot be trusted stops the run (exit 2), not just this episode
        error = evaluation = None
        trajectory = Trajectory(task_id=task.id)
        try:
            result = await executor.run()
            trajectory = steps_to_trajectory(task.id, result.steps, result.termination)
            evaluation = self.evaluate(task, trajectory, solo=True)
        except AgentSpecError as exc:
            error = f"{type(exc).__name__}: {exc}"
            result = None
        execution = {
            "mode": config.mode + ("+spork" if prober is not None else ""),
            "spork_cost_model": executor.spork.report() if executor.spork is not None else None,
            "metrics": executor.metrics.as_dict(),
            "sources": [s.source for s in executor.steps],
            "macros_fired": sorted({s.macro_id for s in executor.steps if s.macro_id}),
            "timeline": [vars(e) for e in executor.timeline.events],
        }
        timings = {"wall_s": time.perf_counter() - started, "simulated_wall_s": executor.metrics.wall_s}
        return Episode(task.id, trial, trajectory, evaluation, timings, error, execution)


def steps_to_trajectory(task_id: str, steps: Sequence[CommittedStep], termination: TerminationReason) -> Trajectory:
    """The executor's committed steps as a solo-mode trajectory (one call per message, then the stop)."""
    trajectory = Trajectory(task_id=task_id)
    for step in steps:
        if step.source == "invalid":
            bad = InvalidToolCall(id=step.call.id, name=step.call.name, raw_arguments="", error=step.observation.content)
            trajectory.messages.append(Message(role="assistant", invalid_tool_calls=[bad]))
        else:
            trajectory.messages.append(Message(role="assistant", tool_calls=[step.call]))
        trajectory.messages.append(Message.from_observation(step.observation))
        trajectory.num_errors += int(step.observation.error)
    trajectory.steps = 2 * len(steps)
    if termination is TerminationReason.AGENT_STOP:
        trajectory.messages.append(Message(role="assistant", content=AGENT_STOP_TOKEN))
        trajectory.steps += 1
    trajectory.termination = termination
    return trajectory
