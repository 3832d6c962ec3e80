"""The real-clock experiments (real_wall.py, decision_cost.py) end to end against a scripted OpenAI-compatible server
serving both model names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scripted_openai_server import ScriptedOpenAIServer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))

from real_wall import overlap_s  # noqa: E402

from agentspec.types import ToolCall  # noqa: E402

AUTHORITY, SPECULATOR = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
CHECK = ToolCall(name="check_status_bar").canonical()


def test_overlap_counts_only_time_two_model_lanes_are_busy():
    events = [
        {"lane": "authority", "start": 0.0, "end": 4.0},
        {"lane": "speculator", "start": 1.0, "end": 2.0},
        {"lane": "probe", "start": 3.0, "end": 6.0},
        {"lane": "tool", "start": 4.0, "end": 8.0},  # a tool beside a model is not two model lanes
        {"lane": "speculator", "start": 5.0, "end": 5.0},  # empty
    ]
    assert overlap_s(events) == 2.0


def test_real_wall_reports_every_mode_and_keeps_warm_up_episodes_out_of_the_figures(tau2_dir, tmp_path):
    def responder(request):
        # Both models make the same two decisions: a read-only phone check, then done.
        if any(m["role"] == "tool" for m in request["messages"]):
            return {"tool_calls": [{"name": "done", "arguments": {}}]}
        return {"tool_calls": [{"name": "check_status_bar", "arguments": {}}]}

    with ScriptedOpenAIServer(responder, models=(AUTHORITY, SPECULATOR)) as srv:
        done = subprocess.run(
            [sys.executable, str(REPO / "experiments" / "real_wall.py"), "--base-url", srv.base_url,
             "--data-dir", str(tau2_dir), "--limit", "2", "--tool-latency", "0.05",
             "--modes", "sequential,sa,sa/draft-first", "--timelines", str(tmp_path)],
            capture_output=True, text=True, timeout=300,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(report) == {"sequential", "sa", "sa/draft-first", "conditions"}
    # One unmeasured episode per task, in the speculating mode so that both models see the task's prompt first.
    assert [w["mode"] for w in report["conditions"]["warmup_episodes"]] == ["sa", "sa"]
    for mode in ("sequential", "sa", "sa/draft-first"):
        figures = report[mode]
        assert figures["tasks"] == 2 and figures["errors"] == [] and figures["same_calls_as_sequential"] == 2
        assert figures["authority_calls"] == 4  # two decisions per task; warm-up episodes are not counted
        assert figures["p95_wall_s"] >= figures["p50_wall_s"] > 0.05  # the emulated tool latency is a real sleep
    assert report["sequential"]["ratio_vs_sequential"] == 1.0 and report["sequential"]["speculator_calls"] == 0
    assert report["conditions"]["tool_latency_s"] == 0.05
    # The authority waits for the speculator's guess only in the draft-first variant.
    assert report["sa"]["mean_time_s"]["draft_wait_s"] == 0 < report["sa/draft-first"]["mean_time_s"]["draft_wait_s"]
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["real-wall-sa-draft-first.png", "real-wall-sa.png", "real-wall-sequential.png"]


def test_decision_cost_times_each_way_and_checks_the_calls_agree(tau2_dir):
    def responder(request):
        return {"tool_calls": [{"name": "check_status_bar", "arguments": {}}],
                "delay_s": 0.05 if request["model"] == AUTHORITY else 0.02}

    with ScriptedOpenAIServer(responder, models=(AUTHORITY, SPECULATOR)) as srv:
        done = subprocess.run(
            [sys.executable, str(REPO / "experiments" / "decision_cost.py"), "--base-url", srv.base_url,
             "--data-dir", str(tau2_dir), "--repeats", "2"],
            capture_output=True, text=True, timeout=300,
        )
        guessed = [r for r in srv.requests if r["model"] == AUTHORITY and r.get("agentspec_predicted_calls")]
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["conditions"]["authority_same_call_every_way"] is True
    for way in ("authority_alone", "speculator_alone", "authority_with_guess", "both_at_once.pair"):
        assert len(report[way]["runs_s"]) == 2 and report[way]["calls"] == [CHECK], way
    assert report["authority_alone"]["median_s"] >= 0.05
    # The guessed way sends the speculator's call with the request: the hint a draft-first authority gets.
    assert [r["agentspec_predicted_calls"] for r in guessed] == [[{"name": "check_status_bar", "arguments": {}}]] * 2
