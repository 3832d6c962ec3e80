"""Run by the official tau2 venv's python (never imported by agentspec): read and re-score tau2 results files.

    python official_check.py REPORT.json RESULTS.json [RESULTS.json ...]

For each file: ``Results.load`` (tau2's loader), tau2's leaderboard checks
(``tau2 submit verify-trajs``: the base split's tasks unchanged, every task run
``num_trials`` times), each participant message's own ``validate()``, and every
simulation re-scored as ``tau2 evaluate-trajs`` does (``evaluate_simulation``
with ``EvaluationType.ALL``, replaying the messages on tau2's telecom
environment), one at a time so that one failing simulation (tau2 raises when a
replayed call answers other than the message recorded) is reported, not fatal
to the rest.  A simulation tau2 refuses for a replay mismatch is scored once
more with tau2's own answers in place of the recorded replies (each call re-run
in order on tau2's environment): tau2's evaluator on the state the same calls
reach in tau2's environment, reported apart (``official_on_tau2_answers``,
with how many replies differed).  Writes one JSON report.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def check(path: Path) -> dict[str, Any]:
    from tau2.data_model.message import AssistantMessage, UserMessage
    from tau2.data_model.simulation import Results
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.scripts.evaluate_trajectories import is_solo_mode
    from tau2.scripts.leaderboard.verify_trajectories_public import check_num_trials, check_tasks

    results = Results.load(path)
    invalid = []
    for sim in results.simulations:
        for message in sim.messages:
            if isinstance(message, AssistantMessage | UserMessage):
                try:
                    message.validate()
                except ValueError as exc:
                    invalid.append({"simulation": sim.id, "turn_idx": message.turn_idx, "error": str(exc)[:200]})
    solo, domain = is_solo_mode(results), results.info.environment_info.domain_name
    tasks = {task.id: task for task in results.tasks}
    rewards = []
    for sim in results.simulations:
        row: dict[str, Any] = {"id": sim.id, "task_id": sim.task_id, "trial": sim.trial,
                               "stored": sim.reward_info.reward if sim.reward_info else None}
        try:
            info = evaluate_simulation(sim, tasks[sim.task_id], EvaluationType.ALL, solo, domain)
            row |= {"official": info.reward, "official_info": info.model_dump(mode="json")}
        except Exception as exc:  # tau2 raises plain ValueErrors (a replay mismatch): report which and why
            row |= {"official": None, "official_error": f"{type(exc).__name__}: {exc}"[:2000]}
            answered, differing = with_tau2_answers(sim, tasks[sim.task_id], solo, domain)
            again = evaluate_simulation(answered, tasks[sim.task_id], EvaluationType.ALL, solo, domain)
            row |= {"official_on_tau2_answers": again.reward, "answers_differing": differing}
        rewards.append(row)
    return {
        "simulations": len(results.simulations),
        "tasks": len(results.tasks),
        "solo": solo,
        "domain": domain,
        "tasks_check": list(check_tasks(results)),
        "trials_check": list(check_num_trials(results)),
        "invalid_messages": invalid,
        "rewards": rewards,
    }


def with_tau2_answers(sim: Any, task: Any, solo: bool, domain: str) -> tuple[Any, int]:
    """``sim`` with every tool reply replaced by tau2's own answer to its call (the calls re-run in order on a fresh
    environment of the task, as tau2's evaluator replays them), and how many answers differ from the recorded."""
    from tau2.data_model.message import AssistantMessage, ToolMessage, UserMessage
    from tau2.registry import registry

    env = registry.get_env_constructor(domain)(solo_mode=solo)
    initial = task.initial_state
    env.set_state(initialization_data=initial.initialization_data if initial else None,
                  initialization_actions=initial.initialization_actions if initial else None, message_history=[])
    calls = {call.id: call for m in sim.messages if isinstance(m, AssistantMessage | UserMessage)
             for call in m.tool_calls or []}
    messages, differing = [], 0
    for message in sim.messages:
        if isinstance(message, ToolMessage):
            answer = env.get_response(calls[message.id])
            differing += _parsed(answer.content) != _parsed(message.content)
            message = message.model_copy(update={"content": answer.content, "error": answer.error})
        messages.append(message)
    return sim.model_copy(update={"messages": messages}), differing


def _parsed(content: str | None) -> Any:
    try:
        return json.loads(content or "")
    except json.JSONDecodeError:
        return content


def main(argv: list[str]) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch (and its retries) on import
    from loguru import logger  # tau2 logs every replayed call at DEBUG: keep warnings only

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    report, *paths = argv
    Path(report).write_text(json.dumps({path: check(Path(path)) for path in paths}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
