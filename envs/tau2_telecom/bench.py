"""tau2-telecom's domain knowledge: tasks, environments, prompts and gold calls (nothing about running).

The tau2 harness (:class:`agentspec.bench.tau2.harness.Tau2Bench`) turns this
domain into a bench that agentspec runs in every mode; this file only says
what the telecom tasks are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentspec.types import Requestor, ToolCall
from envs.tau2_telecom.dataset import TAU2_DATA, Task, TelecomData
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
CHECKS = ("check_status_bar", "check_network_status", "run_speed_test", "check_apn_settings")
"""Read-only phone checks an agent often makes: plausible wrong guesses for a noisy speculator."""


class TelecomBench:
    """The telecom domain of tau2 from one data folder (a tau2 domain for :mod:`agentspec.bench.tau2.harness`)."""

    name = "tau2-telecom"
    tau2_domain = "telecom"
    """The domain's name in tau2's own registry (its results files name it)."""
    data = TAU2_DATA
    """The tau2 data files, pinned by sha256 (``agentspec data pull --bench tau2-telecom``)."""
    shipped_macros = Path(__file__).resolve().parents[2] / "macros" / "tau2-telecom.json"
    """The macro library mined from train's gold calls (``--mode smc``'s default), in a source checkout."""

    def __init__(self, data: TelecomData) -> None:
        self.data = data

    @classmethod
    def from_data_dir(cls, data_dir: str | Path | None = None) -> TelecomBench:
        return cls(TelecomData.locate(data_dir))

    def tasks(self, split: str = "base", task_ids: list[str] | None = None, limit: int | None = None) -> list[Task]:
        return self.data.select(split, task_ids, limit)

    def task(self, task_id: str) -> Task:
        return self.data.select(task_ids=[task_id])[0]

    def all_tasks(self) -> list[Task]:
        return list(self.data.tasks().values())

    def environment(self, task: Task, *, solo: bool = False) -> TelecomEnvironment:
        """A fresh environment with the task's initialisation applied (each action followed by a sync)."""
        env = TelecomEnvironment.from_dir(self.data.telecom, solo=solo)
        for action in task.initial_state.initialization_actions:
            env.run_function(action.env_type, action.func_name, action.arguments)
        env.sync()
        return env

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

    def gold_actions(self, task: Task) -> list[tuple[Requestor, ToolCall]]:
        return [(a.requestor, ToolCall(name=a.name, arguments=a.arguments)) for a in task.evaluation_criteria.actions]

    def common_calls(self) -> list[ToolCall]:
        return [ToolCall(name=name) for name in CHECKS]

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

    def criteria(self, task: Task) -> Any:
        """The task's evaluation criteria (assertions, gold actions, reward basis) for the tau2 evaluator."""
        return task.evaluation_criteria

    def raw_tasks(self) -> dict[str, dict[str, Any]]:
        """The tasks as the data's ``tasks.json`` has them, by id (what tau2's own results files carry)."""
        return {task["id"]: task for task in json.loads(self.data.text("telecom/tasks.json"))}

    def tasks_file(self) -> str:
        return str(self.data.telecom / "tasks.json")

    def official_policy(self, solo: bool) -> str:
        """The agent policy as tau2's telecom environment composes it (the manual variant)."""
        suffix = "_solo" if solo else ""
        main, manual = self.data.text(f"telecom/main_policy{suffix}.md"), self.data.text("telecom/tech_support_manual.md")
        return f"<main_policy>\n{main}\n</main_policy>\n<tech_support_policy>\n{manual}\n</tech_support_policy>"
