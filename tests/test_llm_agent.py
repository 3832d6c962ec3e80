"""The LLM path end to end: `agentspec run` with an LLM agent and user simulator over real HTTP.

The endpoint is ``ScriptedOpenAIServer``, a scripted OpenAI-compatible test double on 127.0.0.1: it answers
like a competent agent and user would, so these tests check the protocol (what each party is sent and sees,
how its answers are routed and scored), not model quality.
"""

from __future__ import annotations

import json

import pytest
from scripted_openai_server import ScriptedOpenAIServer

from agentspec.cli import main

TASK = "[service_issue]airplane_mode_on[PERSONA:None]"
CARRIER_TOOL = "get_customer_by_phone"
PHONE_TOOL = "toggle_airplane_mode"


def tool_names(request):
    return {t["function"]["name"] for t in request.get("tools", [])}


def agent_turn(messages):
    """A scripted support agent: look up the customer, then ask for airplane mode off, then wait."""
    tool_results = [m for m in messages if m["role"] == "tool"]
    if not tool_results:
        return {"tool_calls": [{"name": CARRIER_TOOL, "arguments": {"phone_number": "555-123-2002"}}]}
    if not any("airplane" in (m.get("content") or "") for m in messages if m["role"] == "assistant"):
        return {"content": "Thanks John. Please turn airplane mode off."}
    return {"content": "Glad it works now."}


def user_turn(messages):
    """A scripted customer: complain, toggle airplane mode when told, then stop."""
    said = [m for m in messages if m["role"] == "assistant"]  # the user's own messages, roles swapped
    if not said:
        return {"content": "My phone shows no service."}
    if any(m["role"] == "tool" for m in messages):
        return {"content": "It works! ###STOP###"}
    if "airplane" in messages[-1].get("content", ""):
        return {"tool_calls": [{"name": PHONE_TOOL, "arguments": {}}]}
    return {"content": "What should I do?"}


def responder(request):
    if request["model"] == "agent-model":
        return agent_turn(request["messages"])
    return user_turn(request["messages"])


def run_cli(capsys, tau2_dir, tmp_path, *extra):
    code = main(["run", "--json", "--bench", "tau2-telecom", "--task-ids", TASK, "--data-dir", str(tau2_dir),
                 "--out", str(tmp_path), "--no-progress", *extra])
    captured = capsys.readouterr()
    return code, captured


def test_llm_agent_and_user_simulator_over_http(tau2_dir, tmp_path, capsys):
    with ScriptedOpenAIServer(responder, models=("agent-model", "user-model")) as srv:
        code, captured = run_cli(capsys, tau2_dir, tmp_path, "--agent-model", f"{srv.base_url}#agent-model",
                                 "--user-model", f"{srv.base_url}#user-model")
        requests = list(srv.requests)
    assert code == 0, captured.err
    figures = json.loads(captured.out.strip().splitlines()[-1])["modes"]["sequential"]  # without --mode: sequential
    assert figures["reward_mean"] == 1.0 and figures["terminations"] == {"user_stop": 1}

    agent_requests = [r for r in requests if r["model"] == "agent-model"]
    user_requests = [r for r in requests if r["model"] == "user-model"]
    assert len(tool_names(agent_requests[0])) == 13 and CARRIER_TOOL in tool_names(agent_requests[0])
    assert len(tool_names(user_requests[0])) == 30 and PHONE_TOOL in tool_names(user_requests[0])
    assert "Telecom Agent Policy" in agent_requests[0]["messages"][0]["content"]
    assert "User Simulation Guidelines" in user_requests[0]["messages"][0]["content"]
    assert "John Smith" in user_requests[0]["messages"][0]["content"]  # the scenario reaches the user
    # the user simulator sees the agent's greeting as a user message (roles swapped)
    assert user_requests[0]["messages"][1] == {"role": "user", "content": "Hi! How can I help you today?"}
    # the agent never sees the user's phone tool traffic
    for request in agent_requests:
        assert all(m.get("content") != "It works! ###STOP###" for m in request["messages"])
        assert not any(PHONE_TOOL in json.dumps(m) for m in request["messages"][1:])
    episode = json.loads((tmp_path / "results.json").read_text())["episodes"]["sequential"][0]
    roles = [m["role"] for m in episode["messages"]]
    assert roles[:4] == ["assistant", "user", "assistant", "tool"]


def solo_responder(request):
    messages = request["messages"]
    done_calls = sum(1 for m in messages if m["role"] == "tool")
    plan = [{"name": "check_status_bar", "arguments": {}}, {"name": PHONE_TOOL, "arguments": {}}, {"name": "done", "arguments": {}}]
    return {"tool_calls": [plan[min(done_calls, 2)]]}


def test_solo_llm_agent(tau2_dir, tmp_path, capsys):
    with ScriptedOpenAIServer(solo_responder, models=("solo",)) as srv:
        code, captured = run_cli(capsys, tau2_dir, tmp_path, "--agent-model", srv.base_url, "--solo")
        requests = list(srv.requests)
    assert code == 0, captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["modes"]["sequential"]["reward_mean"] == 1.0
    assert requests[0]["tool_choice"] == "required"
    assert len(tool_names(requests[0])) == 44  # 13 carrier + 30 phone + done
    assert "<ticket>" in requests[0]["messages"][0]["content"]


def test_malformed_tool_call_is_answered_and_counted(tau2_dir, tmp_path, capsys):
    def bad_then_fix(request):
        messages = request["messages"]
        if not any(m["role"] == "tool" for m in messages):
            return {"tool_calls": [{"name": PHONE_TOOL, "arguments": "{not json"}]}
        if sum(m["role"] == "tool" for m in messages) == 1:
            return {"tool_calls": [{"name": PHONE_TOOL, "arguments": {}}]}
        return {"tool_calls": [{"name": "done", "arguments": {}}]}

    with ScriptedOpenAIServer(bad_then_fix, models=("solo",)) as srv:
        code, captured = run_cli(capsys, tau2_dir, tmp_path, "--agent-model", srv.base_url, "--solo")
        second = srv.requests[1]["messages"]
    assert code == 0, captured.err
    episode = json.loads((tmp_path / "results.json").read_text())["episodes"]["sequential"][0]
    assert episode["num_errors"] == 1 and episode["reward"] == 1.0
    # the model sees its malformed call (the executor's history keeps its name, not its unparsable arguments) and
    # the error it caused
    assert second[-2]["tool_calls"][0]["function"]["name"] == PHONE_TOOL
    assert "not a valid JSON object" in second[-1]["content"] and "{not json" not in second[-2]["tool_calls"][0]["function"]["arguments"]


def test_dead_endpoint_is_a_clear_error(tau2_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AGENTSPEC_AGENT_TIMEOUT", "2")
    code, captured = run_cli(capsys, tau2_dir, tmp_path, "--agent-model", "http://127.0.0.1:9/v1#m", "--solo")
    assert code == 2
    assert "127.0.0.1:9" in captured.err and "Traceback" not in captured.err


def test_endpoint_dying_mid_run_is_recorded_not_lost(tau2_dir, tmp_path, capsys):
    calls = {"n": 0}

    def flaky(request):
        calls["n"] += 1
        from scripted_openai_server import ScriptedFailure

        return ScriptedFailure(status=400, times=None) if calls["n"] > 1 else {"tool_calls": [{"name": PHONE_TOOL, "arguments": {}}]}

    with ScriptedOpenAIServer(flaky, models=("solo",)) as srv:
        code, captured = run_cli(capsys, tau2_dir, tmp_path, "--agent-model", srv.base_url, "--solo")
    # Its only episode failed on the endpoint, so the run exits 2 (issue 13, item 8); the results are still written.
    assert code == 2 and "failed on the model endpoint" in captured.err and "HTTP 400" in captured.err
    episode = json.loads((tmp_path / "results.json").read_text())["episodes"]["sequential"][0]
    assert episode["reward"] == 0.0 and "ModelRequestError" in episode["error"]
    assert episode["messages"][0]["tool_calls"][0]["name"] == PHONE_TOOL  # the partial trajectory is kept


@pytest.mark.parametrize("flag", ["--user-model"])
def test_normal_mode_needs_a_user_model(tau2_dir, tmp_path, capsys, flag):
    code, captured = run_cli(capsys, tau2_dir, tmp_path, "--agent-model", "http://127.0.0.1:9/v1#m")
    assert code == 2 and flag in captured.err
