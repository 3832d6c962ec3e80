"""AppWorld as a bench: the user's data folder, AppWorld's own engine in its own venv, AppWorld's own evaluation.

The data (``appworld download data`` on a machine with network) is the user's: ``--data-dir`` or
``$APPWORLD_ROOT``, either the folder holding ``data/`` or ``data/`` itself.  It is never shipped or committed;
tests use our own fixture tasks in the same layout (:mod:`envs.appworld.fixtures`).

Each episode starts a worker in the AppWorld venv (:mod:`envs.appworld.venv`) over a private root whose ``data``
links to the user's, so AppWorld's outputs never land in the user's folder and episodes never share them.

Three ways to act (``actions``), all function calling:

* ``"api"`` (the default): one tool per API, ``<app>__<api>`` (``simple_note__create_note``),
  its schema and description from AppWorld's API docs, its effect from :mod:`envs.appworld.effects`; the
  ``api_docs`` app's own APIs (``api_docs__show_api_doc`` ...) are the meta tools to look documentation up.
  A task is offered the APIs of its ``required_apps`` (``apps=...`` overrides them) plus ``supervisor`` and
  ``api_docs``; a task whose data has no ``required_apps.json`` (AppWorld ships it only with the full ground
  truth: train and dev) is offered every app's, hundreds of tools: the run says so once on stderr, the episode's
  evaluation has ``all_apps`` true and the mode's figures count those tasks as ``all_apps_tasks``;
* ``"meta"`` (SMC's ``execute_api``/``show_api_doc`` style): the ``api_docs`` tools plus
  ``execute_api(app_name, api_name, arguments)`` (a few tools whatever
  the apps; every ``execute_api`` is mutating, since effects go by tool name and it may call any API);
* ``"code"`` (AppWorld's native loop): one tool, ``execute_code``: a Python block against ``apis.<app>.<api>``,
  one block per step (mutating).  The agent's code can reach the worker process it runs in, so code actions run
  one bubblewrap-jailed worker per branch (:mod:`envs.appworld.isolated`): a speculative fork's code cannot touch
  live state; the API tools (code agentspec writes) keep every branch in one worker.

The agent ends with ``done`` (AppWorld's ``apis.supervisor.complete_task`` is an ordinary, mutating API call).
Gold calls come from the task's ``ground_truth/api_calls.json`` (AppWorld ships it where the ground truth is in
"full" mode: train and dev) or, for ``code``, from ``compiled_solution.py``.  The score is AppWorld's evaluation
of the final live state: reward 1.0 iff every test passes; ``success`` and ``scenario`` make TGC and SGC
(:func:`completion_rates`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import BaseModel

from agentspec.bench.protocol import DONE, distractors, done_tool
from agentspec.errors import ConfigError, DataError
from agentspec.sandbox.overlay import run_folder
from agentspec.snapshot import SnapshotBackend
from agentspec.types import (
    Effect,
    Requestor,
    Step,
    TerminationReason,
    ToolCall,
    ToolSpec,
)
from envs.appworld.backend import AppWorldBackend, ToolCode
from envs.appworld.effects import api_effect
from envs.appworld.isolated import IsolatedAppWorldBackend
from envs.appworld.official import write_outputs

__all__ = ["AppWorldBench", "AppWorldData", "AppWorldScore", "AppWorldTask", "completion_rates"]

SPLITS = ("train", "dev", "test_normal", "test_challenge")
HOW_TO_GET = "get it with `appworld download data` on a machine with network, then pass --data-dir or $APPWORLD_ROOT"
DONE_TOOL = done_tool("Finish: call it once the task is complete (after apis.supervisor.complete_task).")
CODE_TOOL = "execute_code"
EXECUTE_API = "execute_api"
INSTRUCTIONS = (
    "You are an assistant acting for the supervisor described below through the APIs of their apps. Look up API "
    "documentation with the api_docs tools when needed, call the APIs to do the task, then mark it complete with "
    "supervisor complete_task (give `answer` only if the task asks a question) and call `done`."
)
_TYPES = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}
ALWAYS_APPS = ("supervisor", "api_docs")
"""Apps every task is offered beside its own: AppWorld's ``required_apps`` leaves them out (and ``admin``)."""


# --- data ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AppWorldTask:
    """One task of the user's data folder (a subset of AppWorld's files, read on demand)."""

    id: str
    instruction: str
    directory: Path

    @property
    def scenario(self) -> str:
        """The scenario (AppWorld's generator id): the task id before ``_``; SGC groups tasks by it."""
        return _scenario(self.id)

    @property
    def truth(self) -> Path:
        return self.directory / "ground_truth"

    def _json(self, name: str) -> Any:
        path = self.truth / name
        return json.loads(path.read_text()) if path.is_file() else None

    @cached_property
    def api_calls(self) -> list[dict[str, Any]] | None:
        """The requests of AppWorld's reference solution (None where the ground truth is minimal)."""
        return self._json("api_calls.json")

    @cached_property
    def required_apps(self) -> list[str] | None:
        """The apps the task needs beyond ``supervisor`` (``[]``: none); None where the data does not say (its
        ground truth is minimal)."""
        return self._json("required_apps.json")

    @cached_property
    def solution_body(self) -> str | None:
        """The reference solution's body (code AppWorld can execute), where the data has it."""
        path = self.truth / "compiled_solution.py"
        if not path.is_file():
            return None
        lines = [line for line in path.read_text().splitlines() if not line.startswith("# Canary String")]
        start = next((i for i, line in enumerate(lines) if line.startswith("def solution(")), None)
        if start is None:
            return None
        body = [line.removeprefix("    ") for line in lines[start + 1:]]
        return "\n".join(body).strip() or None


@dataclass
class AppWorldData:
    """The user's AppWorld data folder (``root/data``), checked once on open."""

    root: Path
    _tasks: dict[str, AppWorldTask] = field(default_factory=dict)

    NEEDED = ("tasks", "datasets", "base_dbs", "api_docs/standard")

    @classmethod
    def locate(cls, data_dir: str | Path | None) -> AppWorldData:
        """``data_dir`` (or ``$APPWORLD_ROOT``): the folder holding ``data/``, or ``data/`` itself."""
        given = data_dir or os.environ.get("APPWORLD_ROOT")
        if not given:
            raise DataError(f"AppWorld needs its data folder (--data-dir or $APPWORLD_ROOT): {HOW_TO_GET}")
        path = Path(given).expanduser().resolve()
        root = path.parent if path.name == "data" and (path / "tasks").is_dir() else path
        missing = [name for name in cls.NEEDED if not (root / "data" / name).is_dir()]
        if missing:
            raise DataError(f"AppWorld data at {root} lacks data/{', data/'.join(missing)}: {HOW_TO_GET}")
        return cls(root)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def split_ids(self, split: str) -> list[str]:
        path = self.data / "datasets" / f"{split}.txt"
        if not path.is_file():
            known = sorted(p.stem for p in (self.data / "datasets").glob("*.txt"))
            raise ConfigError(f"AppWorld split {split!r} is not in {self.data / 'datasets'} (there: {', '.join(known)})")
        return [line.strip().split(":")[0] for line in path.read_text().splitlines() if line.strip()]

    def task(self, task_id: str) -> AppWorldTask:
        if task_id not in self._tasks:
            directory = self.data / "tasks" / task_id
            specs = directory / "specs.json"
            if not specs.is_file():
                raise ConfigError(f"unknown AppWorld task id {task_id!r}: no {specs}")
            self._tasks[task_id] = AppWorldTask(task_id, json.loads(specs.read_text())["instruction"], directory)
        return self._tasks[task_id]

    @cached_property
    def api_docs(self) -> dict[str, dict[str, dict[str, Any]]]:
        """App -> API name -> AppWorld's doc of it (``method``, ``path``, ``parameters``, ...)."""
        docs = {}
        for path in sorted((self.data / "api_docs" / "standard").glob("*.json")):
            docs[path.stem] = {name: doc for name, doc in json.loads(path.read_text()).items()}
        if not docs:
            raise DataError(f"AppWorld data at {self.root} has no API docs in data/api_docs/standard: {HOW_TO_GET}")
        return docs


# --- tools ------------------------------------------------------------------------------------------


def tool_name(app: str, api: str) -> str:
    return f"{app}__{api}"


def _schema(parameters: Iterable[dict[str, Any]]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required = []
    for parameter in parameters:
        kind = str(parameter.get("type", ""))
        schema: dict[str, Any] = {"description": parameter.get("description", "")}
        if kind in _TYPES:
            schema["type"] = _TYPES[kind]
        elif kind.startswith("list"):
            inner = _TYPES.get(kind[5:-1]) if kind.startswith("list[") else None
            schema["type"] = "array"
            if inner:
                schema["items"] = {"type": inner}
        elif kind in ("dict", "object"):
            schema["type"] = "object"
        properties[parameter["name"]] = schema
        if parameter.get("required"):
            required.append(parameter["name"])
    return {"type": "object", "properties": properties, "required": required}


def _api_code(app: str, api: str) -> Any:
    def code(arguments: dict[str, Any]) -> str:
        # JSON in a Python string literal: any argument value survives the trip into AppWorld's shell exactly.
        return f"print(apis.{app}.{api}(**json.loads({json.dumps(arguments)!r})))"

    return code


def _exec_code(arguments: dict[str, Any]) -> str:
    code = arguments.get("code")
    if not isinstance(code, str) or not code.strip():
        raise ValueError("execute_code needs `code`: a non-empty Python block")
    return code


def api_tools(docs: Mapping[str, Mapping[str, dict[str, Any]]], apps: Iterable[str]) -> dict[str, ToolCode]:
    """One tool per API of ``apps`` (the ``api_docs`` app's always), with effects from the declared table."""
    tools = {}
    for app in sorted({*apps, "api_docs"} & set(docs)):
        for api, doc in docs[app].items():
            spec = ToolSpec(name=tool_name(app, api), description=f"[{app}] {doc.get('description', '')}".strip(),
                            parameters=_schema(doc.get("parameters", [])),
                            effect=api_effect(app, api, doc.get("method")))
            tools[spec.name] = ToolCode(spec, _api_code(app, api))
    return tools


def _meta_code(docs: Mapping[str, Mapping[str, dict[str, Any]]]) -> Any:
    def code(arguments: dict[str, Any]) -> str:
        app, api, given = arguments.get("app_name"), arguments.get("api_name"), arguments.get("arguments") or {}
        if not isinstance(app, str) or app not in docs or api not in docs[app]:
            raise ValueError(f"no API {app}.{api}: look it up with the api_docs tools")
        if not isinstance(given, dict):
            raise ValueError("`arguments` must be an object of the API's parameters")  # noqa: TRY004 - shown to the agent
        return _api_code(str(app), str(api))(given)

    return code


def meta_tools(docs: Mapping[str, Mapping[str, dict[str, Any]]]) -> dict[str, ToolCode]:
    """The ``api_docs`` app's APIs plus ``execute_api(app_name, api_name, arguments)``: a handful of tools for
    every app.  ``execute_api`` may call any API, so it is mutating (effects are per tool name, fail closed)."""
    tools = api_tools(docs, ["api_docs"])
    spec = ToolSpec(name=EXECUTE_API, description="Call one AppWorld API: apis.<app_name>.<api_name>(**arguments).",
                    parameters={"type": "object", "properties": {
                        "app_name": {"type": "string"}, "api_name": {"type": "string"},
                        "arguments": {"type": "object", "description": "the API's parameters by name"}},
                        "required": ["app_name", "api_name"]},
                    effect=Effect.MUTATING)
    tools[EXECUTE_API] = ToolCode(spec, _meta_code(docs))
    return tools


def code_tools() -> dict[str, ToolCode]:
    spec = ToolSpec(name=CODE_TOOL, description="Execute a block of Python in the AppWorld shell; call APIs as "
                    "apis.<app>.<api>(**kwargs) and print what you need to see.",
                    parameters={"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
                    effect=Effect.MUTATING)
    return {CODE_TOOL: ToolCode(spec, _exec_code)}


def _routes(docs: Mapping[str, Mapping[str, dict[str, Any]]]) -> list[tuple[str, re.Pattern[str], str, str, dict]]:
    """(method, path regex, app, api, parameter types) for every API; literal paths before templated ones."""
    routes = []
    for app, apis in docs.items():
        for api, doc in apis.items():
            path = str(doc["path"])
            pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(path))
            types = {p["name"]: p.get("type") for p in doc.get("parameters", [])}
            routes.append((str(doc["method"]).lower(), re.compile(f"^{pattern}$"), app, api, types))
    routes.sort(key=lambda route: route[1].pattern.count("(?P<"))
    return routes


def _path_value(text: str, kind: str | None) -> Any:
    if kind == "integer":
        return int(text)
    if kind == "number":
        return float(text)
    return text


def gold_call(request: Mapping[str, Any], routes: Sequence[tuple[str, re.Pattern[str], str, str, dict]]) -> ToolCall:
    """The tool call that makes one recorded AppWorld request (``{"method", "url", "data"}``)."""
    method, url = str(request["method"]).lower(), str(request["url"])
    for route_method, pattern, app, api, types in routes:
        match = pattern.match(url) if route_method == method else None
        if match:
            arguments = {name: _path_value(value, types.get(name)) for name, value in match.groupdict().items()}
            arguments.update(request.get("data") or {})
            return ToolCall(name=tool_name(app, api), arguments=arguments)
    raise DataError(f"AppWorld request {method.upper()} {url} matches no API in the data's API docs")


def _as_execute_api(call: ToolCall) -> ToolCall:
    app, _, api = call.name.partition("__")
    return ToolCall(name=EXECUTE_API, arguments={"app_name": app, "api_name": api, "arguments": call.arguments})


# --- scores -----------------------------------------------------------------------------------------


class AppWorldScore(BaseModel):
    """AppWorld's verdict on an episode: reward 1.0 iff every test passed (the task counts for TGC)."""

    reward: float
    success: bool
    scenario: str
    num_tests: int
    passed: list[str]
    failed: list[str]
    difficulty: int | None = None
    termination: TerminationReason
    all_apps: bool = False
    """The task's data names no required apps, so the agent was offered every app's API tools
    (``--bench-option apps=...`` restricts them)."""
    end_state: dict[str, Any] | None = None
    """The task output AppWorld scored (:class:`envs.appworld.official.EndState`), for ``appworld evaluate``."""


async def _evaluate(live: SnapshotBackend) -> dict[str, Any]:
    """AppWorld's report on ``live``: the AppWorld backend, or a wrapper of one (the run's real-time wrapper on the
    virtual clock passes ``evaluate`` through, timed as real work)."""
    evaluate = getattr(live, "evaluate", None)
    if evaluate is None:
        raise ConfigError("AppWorld episodes are scored on an AppWorld backend")
    return await evaluate()


def _scenario(task_id: str) -> str:
    return task_id.split(":")[0].split("_")[0]


def completion_rates(records: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """TGC (share of tasks whose tests all pass) and SGC (share of scenarios all of whose tasks pass), in %.

    ``records``: episode evaluations (``AppWorldScore.model_dump()``) or episode records with an ``evaluation``.

        >>> completion_rates([{"success": True, "scenario": "a"}, {"success": False, "scenario": "a"},
        ...                   {"success": True, "scenario": "b"}])
        {'tgc': 66.7, 'sgc': 50.0}
    """
    by_scenario: dict[str, list[bool]] = defaultdict(list)
    for record in records:
        evaluation = record.get("evaluation", record) or {}
        if "scenario" not in evaluation:
            continue
        by_scenario[evaluation["scenario"]].append(bool(evaluation.get("success")))
    outcomes = [ok for oks in by_scenario.values() for ok in oks]
    if not outcomes:
        return {"tgc": None, "sgc": None}
    tgc = 100 * sum(outcomes) / len(outcomes)
    sgc = 100 * sum(all(oks) for oks in by_scenario.values()) / len(by_scenario)
    return {"tgc": round(tgc, 1), "sgc": round(sgc, 1)}


# --- the bench --------------------------------------------------------------------------------------


class AppWorldBench:
    """AppWorld tasks from the user's folder, played solo on AppWorld's engine (the ``Bench`` protocol)."""

    name = "appworld"
    default_split = "dev"
    in_process = False

    def __init__(self, data: AppWorldData, *, python: str | Path | None = None,
                 actions: Literal["api", "meta", "code"] = "api", apps: Sequence[str] | None = None,
                 timeout_s: int = 100) -> None:
        if actions not in ("api", "meta", "code"):
            raise ConfigError(f"AppWorld actions {actions!r}: use api (a tool per API), meta (execute_api) or code")
        self.data = data
        self.actions = actions
        self.apps = list(apps) if apps else None
        if self.apps:
            self._check_apps(self.apps)
        self.timeout_s = timeout_s
        self._python = Path(python) if python else None
        self._said_all_apps = False

    @classmethod
    def setup(cls, *, venv: str | None = None) -> dict[str, Any]:
        """``agentspec bench setup appworld``: make AppWorld's own venv (``venv`` overrides where); its summary."""
        from envs.appworld.venv import ensure_venv

        return ensure_venv(Path(venv).expanduser() if venv else None)

    @classmethod
    def from_data_dir(cls, data_dir: str | Path | None = None, *, python: str | Path | None = None,
                      actions: str = "api", apps: str | Sequence[str] | None = None, **ignored: Any) -> AppWorldBench:
        """The user's AppWorld folder (``--data-dir`` or ``$APPWORLD_ROOT``); ``apps`` like ``"spotify,venmo"``
        limits the API tools to those apps' (and ``supervisor``'s, ``api_docs``'s) for every task (default: the
        task's required apps where known, else all)."""
        if isinstance(apps, str):
            apps = [app.strip() for app in apps.split(",") if app.strip()]
        return cls(AppWorldData.locate(data_dir), python=python, actions=actions, apps=apps)  # type: ignore[arg-type]

    def _check_apps(self, apps: Sequence[str]) -> None:
        unknown = sorted(set(apps) - set(self.data.api_docs))
        if unknown:
            raise ConfigError(f"--bench-option apps: no app {', '.join(unknown)} in the AppWorld data's API docs "
                              f"(apps: {', '.join(self._own_apps())})")

    def _own_apps(self) -> list[str]:
        """The apps a task may require (every app of the API docs but those always offered, and ``admin``)."""
        return sorted(set(self.data.api_docs) - {*ALWAYS_APPS, "admin"})

    @property
    def python(self) -> Path:
        """The AppWorld venv's interpreter; ConfigError with the setup command when there is none."""
        if self._python is None:
            from envs.appworld.venv import venv_python

            self._python = venv_python()
        if not self._python.exists():
            raise ConfigError(f"the AppWorld venv is missing ({self._python}): run `agentspec bench setup appworld`")
        return self._python

    # --- tasks ---------------------------------------------------------------------------------

    def tasks(self, split: str = "dev", task_ids: list[str] | None = None, limit: int | None = None) -> list[AppWorldTask]:
        """The split's tasks (or ``task_ids``), at most ``limit``; the first selection with tasks offered every
        app's tools says so on stderr (once per bench: the run's tasks are selected first)."""
        chosen = self._select(split, task_ids, limit)
        self._say_all_apps(chosen)
        return chosen

    def _select(self, split: str, task_ids: list[str] | None = None, limit: int | None = None) -> list[AppWorldTask]:
        chosen = [self.task(t) for t in task_ids] if task_ids else [self.task(t) for t in self.data.split_ids(split)]
        return chosen[:limit] if limit is not None else chosen

    def _say_all_apps(self, tasks: Sequence[AppWorldTask]) -> None:
        """One warning line, once: how many ``tasks`` get every app's API tools, and how many tools that is."""
        wide = [task for task in tasks if self.all_apps(task)]
        if self._said_all_apps or not wide:
            return
        self._said_all_apps = True
        tools = len(self.tools(wide[0], solo=True))
        print(f"warning: appworld: {len(wide)} of {len(tasks)} tasks (first: {wide[0].id}) have no required_apps in "
              f"their data, so each is offered every app's API tools ({tools} tools in its prompt); restrict them "
              f"with --bench-option apps=APP,APP (apps: {', '.join(self._own_apps())})", file=sys.stderr)

    def task(self, task_id: str) -> AppWorldTask:
        return self.data.task(task_id)

    # --- environment and tools -------------------------------------------------------------------

    def all_apps(self, task: AppWorldTask) -> bool:
        """Whether ``task`` is offered every app's API tools: ``api`` actions, no ``apps`` option, and no
        ``required_apps`` in its data (an empty list is known: the task needs ``supervisor`` alone)."""
        return self.actions == "api" and self.apps is None and task.required_apps is None

    def _tool_table(self, task: AppWorldTask) -> dict[str, ToolCode]:
        if self.actions == "code":
            return code_tools()
        if self.actions == "meta":
            return meta_tools(self.data.api_docs)
        if self.all_apps(task):
            return api_tools(self.data.api_docs, list(self.data.api_docs))
        return api_tools(self.data.api_docs, [*(self.apps or task.required_apps or []), *ALWAYS_APPS])

    @asynccontextmanager
    async def open_backend(self, task: AppWorldTask, *, solo: bool) -> AsyncIterator[SnapshotBackend]:
        """A worker on a private root (``data`` linked to the user's), closed and removed on exit."""
        python = self.python
        # Named with this process, so that what a killed run leaves is swept (agentspec sandbox sweep, the next run).
        root = await anyio.to_thread.run_sync(run_folder, f"appworld-{task.id}")
        try:
            backend: AppWorldBackend | IsolatedAppWorldBackend
            if self.actions == "code":  # the agent's code runs in the worker: one jailed worker per branch
                backend = IsolatedAppWorldBackend(python, root, self.data.data, task.id, self._tool_table(task),
                                                  timeout_s=self.timeout_s)
            else:
                (root / "data").symlink_to(self.data.data, target_is_directory=True)
                backend = AppWorldBackend(python, root, task.id, self._tool_table(task), timeout_s=self.timeout_s)
            async with backend:
                yield backend
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(root, ignore_errors=True))

    def tools(self, task: AppWorldTask, *, solo: bool) -> list[ToolSpec]:
        return [*(tool.spec for tool in self._tool_table(task).values()), DONE_TOOL]

    def system_prompt(self, task: AppWorldTask, *, solo: bool) -> str:
        specs = json.loads((task.directory / "specs.json").read_text())
        person = specs.get("supervisor") or specs.get("main_user") or {}
        who = " ".join(str(person.get(k, "")) for k in ("first_name", "last_name")).strip()
        contact = f"{who} ({person.get('email', '')}, phone {person.get('phone_number', '')})"
        how = {"code": "Write Python blocks with execute_code; each block is one step.",
               "meta": "Call APIs with execute_api.", "api": "Each tool is one API: <app>__<api>."}[self.actions]
        return f"{INSTRUCTIONS} {how}\n\nSupervisor: {contact}\nNow: {specs.get('datetime', '')}\n\n<task>\n{task.instruction}\n</task>"

    # --- reference calls and mining -----------------------------------------------------------------

    @cached_property
    def _routes(self) -> list[tuple[str, re.Pattern[str], str, str, dict]]:
        return _routes(self.data.api_docs)

    def gold_actions(self, task: AppWorldTask) -> list[tuple[Requestor, ToolCall]]:
        """The reference solution as calls (then ``done``); empty where the data has no full ground truth."""
        if self.actions == "code":
            body = task.solution_body
            calls = [ToolCall(name=CODE_TOOL, arguments={"code": body})] if body else []
        else:
            calls = [gold_call(request, self._routes) for request in task.api_calls or []]
            if self.actions == "meta":
                calls = [_as_execute_api(call) for call in calls]
        return [("assistant", call) for call in [*calls, ToolCall(name=DONE)]] if calls else []

    def distractors(self) -> list[ToolCall]:
        """Every distinct gold call of the train and dev splits that are there (but ``done``), sorted."""
        splits = [split for split in ("train", "dev") if (self.data.data / "datasets" / f"{split}.txt").is_file()]
        gold = (call for split in splits for task in self._select(split) for _, call in self.gold_actions(task))
        return distractors(call for call in gold if call.name != DONE)

    def value_patterns(self) -> list[tuple[str, str, str | None]]:
        return [("access_token", r"[\w-]+\.[\w-]+\.[\w-]+", r"^access_token$"), ("email", r"[^@\s]+@[^@\s]+", r"email|username")]

    # --- scoring --------------------------------------------------------------------------------------

    def figures(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``tgc`` and ``sgc`` (%) of one mode's episodes; an episode that failed before it was scored counts as a
        task whose tests did not pass (its scenario is its task id's prefix).  ``all_apps_tasks``, only where
        some were: the tasks offered every app's API tools (:meth:`all_apps`)."""
        outcomes = [{"scenario": _scenario(str(r["task_id"])), "success": r.get("reward") == 1.0} for r in records]
        wide = sum(self.all_apps(self.task(task_id)) for task_id in {str(r["task_id"]) for r in records})
        return completion_rates(outcomes) | ({"all_apps_tasks": wide} if wide else {})

    async def evaluate(self, task: AppWorldTask, steps: Sequence[Step], termination: TerminationReason, *,
                       solo: bool, live: SnapshotBackend, final: dict[str, Any] | None = None) -> AppWorldScore:
        """AppWorld's own evaluation of the live state the episode left (whatever the termination)."""
        report = await _evaluate(live)
        success = bool(report.get("success"))
        return AppWorldScore(
            reward=1.0 if success else 0.0, success=success, scenario=task.scenario,
            num_tests=int(report.get("num_tests") or 0), passed=[p["requirement"] for p in report.get("passes", [])],
            failed=[f["requirement"] for f in report.get("failures", [])], difficulty=report.get("difficulty"),
            termination=termination, all_apps=self.all_apps(task), end_state=report.get("end_state"))

    def write_outputs(self, out: Path, records: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Path]:
        """AppWorld's experiment outputs of each mode under ``out/appworld`` (an AppWorld root over the user's data),
        for ``appworld evaluate agentspec_MODE SPLIT --root out/appworld`` (:mod:`envs.appworld.official`)."""
        return write_outputs(out / "appworld", self.data.data, records)
