"""agentspec's episodes of a tau2 domain as tau2's own simulation results, the file ``tau2 view`` and ``tau2 evaluate-trajs`` read.

tau2 keeps a run as one JSON document (``tau2.data_model.simulation.Results``):
``info`` (domain, agent and user, trials, limits), ``tasks`` (the tasks as
tau2's ``tasks.json`` has them) and ``simulations`` (one ``SimulationRun`` per
episode: its messages in tau2's message format, how it ended, and its
``reward_info``).  :func:`write_results` builds that document from the episode
records of ``results.json``; the official package is never imported here (a
test loads and re-scores the files in the package's own venv).

What maps how:

* the play: tau2's tools tell solo from normal by the implementation names in
  ``info`` (``llm_agent_solo`` with ``dummy_user``), so a solo run is written
  under those names whatever agent played it (agentspec's mode and the agent's
  kind are in ``agent_info.llm_args``).  An episode is solo when no user spoke.
* messages keep their order; each gets its ``turn_idx``.  An agent stop ends
  with the assistant text ``###STOP###`` as in tau2 (agentspec's evaluator
  scores it that way too).  A call tau2 cannot hold (arguments that were not
  JSON, a call that never ran) leaves the message's ``tool_calls`` and is kept
  in its ``raw_data``, with the error reply it got: tau2 re-runs every call in
  ``tool_calls`` and expects each answered by the next message.
* ``reward_info`` is agentspec's evaluation: the reward, each environment
  assertion and gold action check (in the task's order), the reward basis and
  its breakdown.
* an episode that failed before it ended is written as tau2 writes a failed
  sample: ``agent_error``, ``skipped``, reward 0, the error in ``reward_info.info``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentspec.bench.tau2.evaluator import Evaluation
from agentspec.bench.tau2.parties import AGENT_STOP_TOKEN
from agentspec.errors import ConfigError
from agentspec.types import Message, TerminationReason

TAU2_FOLDER = "tau2"

TAU2_RESULTS = "results.json"
"""tau2's own results file (a run folder's, in its newer releases; ``OUT/tau2/`` here when one mode ran)."""


@dataclass(frozen=True)
class Tau2Source:
    """What a tau2 domain gives the writer: its name, its tasks as its ``tasks.json`` has them (by id, where that
    file lives) and the agent policy as tau2's environment composes it for each play."""

    domain: str
    raw_tasks: Mapping[str, Mapping[str, Any]]
    tasks_file: str
    policy: Callable[[bool], str]
    """``policy(solo)``."""


def _agentspec_version() -> str:
    try:
        return version("agentspec")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown"
STOP_FUNCTION = "done"
"""The solo agent's closing call, which tau2 writes as the stop text."""
Record = Mapping[str, Any]


def write_results(out: Path, records: Mapping[str, Sequence[Record]], *, source: Tau2Source, max_steps: int,
                  max_errors: int) -> list[Path]:
    """Write ``out/tau2/results.json`` (one mode ran) or ``out/tau2/results-MODE.json`` (one per mode, several ran).

    ``records``: mode name -> that mode's episode records, as in agentspec's ``results.json``.  The paths written.
    A record that is not an episode of this data's tasks is refused (ConfigError) before any file is written.
    """
    documents = {mode: results_document(mode, list(mode_records), source=source, max_steps=max_steps,
                                        max_errors=max_errors)
                 for mode, mode_records in records.items() if mode_records}
    folder = out / TAU2_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for mode, document in documents.items():
        path = folder / (TAU2_RESULTS if len(documents) == 1 else f"results-{mode}.json")
        path.write_text(json.dumps(document, indent=1), encoding="utf-8")
        paths.append(path)
    return paths


def results_document(mode: str, records: Sequence[Record], *, source: Tau2Source, max_steps: int,
                     max_errors: int) -> dict[str, Any]:
    """One mode's episodes as a tau2 ``Results`` document (a JSON object)."""
    raw_tasks = source.raw_tasks
    unknown = sorted({str(r.get("task_id")) for r in records} - raw_tasks.keys())
    if unknown:
        raise ConfigError(f"mode {mode}: episode(s) of task(s) not in {source.tasks_file}: {unknown[:3]}")
    plays = {_is_solo(_messages_of(r, mode)) for r in records}
    if len(plays) != 1:
        raise ConfigError(f"mode {mode}: solo and normal episodes in one mode; tau2's results hold one play")
    solo = plays.pop()
    task_ids = list(dict.fromkeys(str(r["task_id"]) for r in records))
    return {
        "timestamp": _now(),
        "info": _info(mode, records, source=source, solo=solo, max_steps=max_steps, max_errors=max_errors),
        "tasks": [raw_tasks[task_id] for task_id in task_ids],
        "simulations": [simulation(r, mode, raw_tasks[str(r["task_id"])]) for r in records],
    }


def _info(mode: str, records: Sequence[Record], *, source: Tau2Source, solo: bool, max_steps: int,
          max_errors: int) -> dict[str, Any]:
    suffix = "_solo" if solo else ""
    return {
        "git_commit": f"agentspec {_agentspec_version()}",
        "num_trials": max(int(r.get("trial") or 0) for r in records) + 1,
        "max_steps": max_steps,
        "max_errors": max_errors,
        "user_info": {"implementation": "dummy_user" if solo else "user_simulator", "llm": None, "llm_args": None},
        "agent_info": {"implementation": f"llm_agent{suffix}", "llm": None, "llm_args": {"agentspec_mode": mode}},
        "environment_info": {"domain_name": source.domain, "policy": source.policy(solo), "tool_defs": None},
        "seed": None,
    }


def simulation(record: Record, mode: str, task: Mapping[str, Any]) -> dict[str, Any]:
    """One episode record as a tau2 ``SimulationRun``."""
    where = f"mode {mode}, task {record.get('task_id')!r} trial {record.get('trial')}"
    messages = _messages_of(record, mode)
    termination = record.get("termination")
    try:
        ended = TerminationReason(termination) if termination else None
    except ValueError as exc:
        raise ConfigError(f"{where}: unknown termination {termination!r}") from exc
    duration = float((record.get("timings") or {}).get("wall_s") or 0.0)
    end = _parse_time(record.get("ended_at"), where)
    trial = int(record.get("trial") or 0)
    return {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"agentspec:{mode}:{record['task_id']}:{trial}:{end.isoformat()}")),
        "task_id": str(record["task_id"]),
        "timestamp": end.isoformat(),
        "start_time": (end - timedelta(seconds=duration)).isoformat(),
        "end_time": end.isoformat(),
        "duration": duration,
        "termination_reason": ended.value if ended else TerminationReason.AGENT_ERROR.value,
        "agent_cost": None,
        "user_cost": None,
        "reward_info": reward_info(record, task, where),
        "messages": tau2_messages(messages, ended),
        "trial": trial,
        "seed": None,
        "skipped": ended is None,
    }


def _messages_of(record: Record, mode: str) -> list[Message]:
    try:
        return [Message.model_validate(m) for m in record.get("messages") or []]
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"mode {mode}, task {record.get('task_id')!r}: a message is not agentspec's message format "
                          f"({first['loc']}: {first['msg']})") from exc


def _is_solo(messages: Sequence[Message]) -> bool:
    return not any(m.role == "user" for m in messages)


def _parse_time(value: Any, where: str) -> datetime:
    """When the episode ended; a record from before agentspec kept that time has the time of writing instead."""
    if value is None:
        return datetime.now(UTC)
    try:
        return datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise ConfigError(f"{where}: ended_at {value!r} is not an ISO 8601 time") from exc


def _now() -> str:
    return datetime.now(UTC).isoformat()


# --- messages ---------------------------------------------------------------------------------------------------


def tau2_messages(messages: Sequence[Message], termination: TerminationReason | None) -> list[dict[str, Any]]:
    """agentspec's messages in tau2's format: every call in ``tool_calls`` answered by the message after it."""
    answers = {m.tool_call_id: m for m in messages if m.role == "tool" and m.tool_call_id}
    held = {call.id for m in messages for call in m.tool_calls if call.id in answers and call.name != STOP_FUNCTION}
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            if message.tool_call_id in held:
                out.append(_tool_message(message))
            continue  # the reply to a call tau2 cannot hold: kept with that call in its message's raw_data
        out.append(_participant(message, held, answers))
    if termination is TerminationReason.AGENT_STOP and not _ends_with_stop(out):
        out.append({"role": "assistant", "content": AGENT_STOP_TOKEN, "tool_calls": None})
    for index, written in enumerate(out):
        written["turn_idx"] = index
        written["timestamp"] = None  # agentspec keeps no time per message
    return out


def _participant(message: Message, held: set[str], answers: Mapping[str, Message]) -> dict[str, Any]:
    if message.role == "system":
        return {"role": "system", "content": message.content}
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments, "requestor": message.role}
             for c in message.tool_calls if c.id in held]
    content = message.content
    if any(c.name == STOP_FUNCTION for c in message.tool_calls):
        content, calls = AGENT_STOP_TOKEN, []  # tau2's solo agent: a `done` call is the stop text, its other calls dropped
    left_out = [c for c in message.tool_calls if c.id not in held]
    raw: dict[str, Any] = {}
    if left_out:
        raw["calls_not_replayable"] = [_left_out(c.model_dump(mode="json"), answers.get(c.id)) for c in left_out]
    if message.invalid_tool_calls:
        raw["invalid_tool_calls"] = [_left_out(c.model_dump(mode="json"), answers.get(c.id))
                                     for c in message.invalid_tool_calls]
    return {"role": message.role, "content": content, "tool_calls": calls or None, "raw_data": raw or None}


def _left_out(call: dict[str, Any], reply: Message | None) -> dict[str, Any]:
    return {**call, "reply": reply.content if reply else None}


def _tool_message(message: Message) -> dict[str, Any]:
    return {"role": "tool", "id": message.tool_call_id, "content": message.content,
            "requestor": message.requestor or "assistant", "error": message.error}


def _ends_with_stop(messages: Sequence[Mapping[str, Any]]) -> bool:
    last = messages[-1] if messages else None
    return bool(last and last["role"] == "assistant" and AGENT_STOP_TOKEN in (last.get("content") or ""))


# --- reward -----------------------------------------------------------------------------------------------------


def reward_info(record: Record, task: Mapping[str, Any], where: str) -> dict[str, Any]:
    """agentspec's evaluation of the episode as tau2's ``RewardInfo`` (the task gives each check's full criterion)."""
    if record.get("evaluation") is None:
        return {"reward": 0.0, "reward_basis": None, "info": {"error": record.get("error")}}
    try:
        evaluation = Evaluation.model_validate(record["evaluation"])
    except ValidationError as exc:
        raise ConfigError(f"{where}: its evaluation is not a tau2 evaluation ({exc.errors()[0]['msg']})") from exc
    criteria = task.get("evaluation_criteria") or {}
    assertions = _paired(evaluation.env_assertions, criteria.get("env_assertions") or [], "func_name", where)
    actions = _paired(evaluation.actions, criteria.get("actions") or [], "name", where)
    breakdown: dict[str, float] = {}
    if "ENV_ASSERTION" in evaluation.reward_basis:
        breakdown["ENV_ASSERTION"] = float(all(check.passed for check, _ in assertions))
    if "ACTION" in evaluation.reward_basis:
        breakdown["ACTION"] = float(all(check.passed for check, _ in actions))
    return {
        "reward": evaluation.reward,
        "db_check": None,  # agentspec scores on the assertions and actions the telecom tasks name, not a DB hash
        "env_assertions": [{"env_assertion": spec, "met": c.passed, "reward": float(c.passed)} for c, spec in assertions],
        "action_checks": [{"action": spec, "action_match": c.passed, "action_reward": float(c.passed)}
                          for c, spec in actions] or None,
        "reward_basis": evaluation.reward_basis,
        "reward_breakdown": breakdown,
        "info": {"note": evaluation.note, "scored_by": "agentspec"},
    }


def _paired(checks: Sequence[Any], specs: Sequence[Mapping[str, Any]], key: str, where: str) -> list[tuple[Any, Any]]:
    """Each check with the task's criterion it checked (the evaluator checks them in the task's order)."""
    if len(checks) != len(specs) and checks:
        raise ConfigError(f"{where}: {len(checks)} checks for the task's {len(specs)} criteria")
    pairs = list(zip(checks, specs, strict=False))
    for check, spec in pairs:
        if check.name != spec.get(key):
            raise ConfigError(f"{where}: check {check.name!r} does not match the task's {spec.get(key)!r}")
    return pairs
