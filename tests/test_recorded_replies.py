"""Every tool call recorded in real runs of the reference tau2 (``../shared/data/traces``) answers, in our environment,
byte for byte what the reference's environment answered.

The recordings are tau2 simulation files: a message with ``tool_calls`` is followed by ``tool`` messages whose ``id``
is the call's and whose ``content`` (and ``error`` flag) is the reference environment's answer.  Each simulation is
replayed from a fresh environment of its task, calls in recorded order, as tau2's own ``evaluate-trajs`` replays
them (it refuses a trajectory whose recorded reply differs from its answer).  Solo files (agent implementation
``llm_agent_solo``) run in solo mode, where the agent makes the phone calls too.

KNOWN_DIFFERENCES would hold, each with its reason, a recorded call whose answer differs from ours in fact (not in
words); there is none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentspec.types import ToolCall

TRACE_FILES = [
    "blake_grok-3_telecom-workflow.json",
    "linyxus_gemini-3.1-flash-lite_telecom-workflow.json",
    "sierra_gpt-4.1_telecom_default.json",
    "sierra_gpt-4.1_telecom_solo.json",
]

# (file, task id, tool call id) -> why our answer differs in fact.  Empty: every recorded reply is reproduced.
KNOWN_DIFFERENCES: dict[tuple[str, str, str], str] = {}


def replay(bench: Any, trace: dict[str, Any], name: str) -> tuple[int, list[dict[str, Any]]]:
    """How many recorded replies there are, and each one our environment answers otherwise."""
    solo = trace["info"]["agent_info"]["implementation"].endswith("solo")
    replies, differing = 0, []
    for simulation in trace["simulations"]:
        env = bench.environment(bench.task(simulation["task_id"]), solo=solo)
        recorded = {m["id"]: m for m in simulation["messages"] if m["role"] == "tool"}
        for message in simulation["messages"]:
            for call in message.get("tool_calls") or []:
                requestor = "user" if message["role"] == "user" else "assistant"
                ours = env.execute(ToolCall(name=call["name"], arguments=call["arguments"] or {}), requestor)
                answer = recorded.get(call["id"])
                if answer is None:  # a call cut off by the end of the run: executed, never answered
                    continue
                replies += 1
                if (ours.content, ours.error) != (answer["content"] or "", bool(answer.get("error"))):
                    differing.append({"key": (name, simulation["task_id"], call["id"]), "tool": call["name"],
                                      "arguments": call["arguments"], "recorded": answer["content"],
                                      "recorded_error": answer.get("error"), "ours": ours.content,
                                      "ours_error": ours.error})
    return replies, differing


@pytest.mark.parametrize("name", TRACE_FILES)
def test_recorded_replies_are_reproduced(traces_dir: Path, bench: Any, name: str) -> None:
    path = traces_dir / name
    if not path.is_file():
        pytest.skip(f"{path} is not there")
    replies, differing = replay(bench, json.loads(path.read_text(encoding="utf-8")), name)
    assert replies > 0
    unexpected = [d for d in differing if d["key"] not in KNOWN_DIFFERENCES]
    assert unexpected == [], f"{len(unexpected)} of {replies} recorded replies differ; first: {unexpected[0]}"
    assert sorted(d["key"] for d in differing) == sorted(k for k in KNOWN_DIFFERENCES if k[0] == name)
