"""A speculator's guess that is ready only while the authority decodes still reaches the authority's decoder.

``POST /v1/agentspec/hints`` puts predicted calls into a running request (by its ``agentspec_request_id``);
the executor sends the speculator's next call there when the authority's request started before the guess was
ready.  The answer stays the greedy one: a hint changes how fast it comes, never what it is.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import httpx
import pytest
import torch
from decoding_support import SMOL, local
from local_models import WEATHER_TOOLS
from scripted_openai_server import ScriptedOpenAIServer

from agentspec.cli import main
from agentspec.models import ModelClient, ModelConfig
from agentspec.serve import create_app, load_engines

# A long question: its prefill keeps the request running while the hint is posted.
FILLER = " ".join(f"Note {i}: the forecast service answers in the unit asked for." for i in range(120))
WEATHER = [{"role": "user", "content": f"{FILLER}\nWhat is the weather in Paris, in celsius?"}]
# A guess that is wrong about the city: the schema drafter drafts whatever a right guess would (the question's
# "Paris" included), so only a wrong one shows among the drafted sources; it must not change the answer.
WRONG = {"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}
BODY = {"model": SMOL, "temperature": 0, "messages": WEATHER, "tools": WEATHER_TOOLS, "tool_choice": "required",
        "max_tokens": 60}


@pytest.fixture(scope="module")
def apps() -> dict[str, Any]:
    local(SMOL)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield {"greedy": create_app(load_engines([SMOL])), "toolspec": create_app(load_engines([SMOL], decoder="toolspec"))}
    torch.set_num_threads(before)


def test_a_hint_posted_to_a_running_request_is_drafted_and_changes_nothing(apps: dict[str, Any]) -> None:
    async def go() -> dict[str, Any]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps["greedy"]), base_url="http://t",
                                     timeout=300) as client:
            greedy = (await client.post("/v1/chat/completions", json=BODY)).json()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps["toolspec"]), base_url="http://t",
                                     timeout=300) as client:
            out: dict[str, Any] = {"greedy": greedy}

            async def authority() -> None:
                body = {**BODY, "agentspec_request_id": "authority-7"}
                out["answer"] = (await client.post("/v1/chat/completions", json=body)).json()

            async with anyio.create_task_group() as group:
                group.start_soon(authority)
                while (await client.get("/stats")).json()[SMOL]["active"] == 0:
                    await anyio.sleep(0.01)
                late = {"request_id": "authority-7", "predicted_calls": [WRONG]}
                out["delivered"] = (await client.post("/v1/agentspec/hints", json=late)).json()
            out["after"] = (await client.post("/v1/agentspec/hints", json=late)).json()  # the request has ended
            out["stats"] = (await client.get("/stats")).json()[SMOL]
            return out

    out = anyio.run(go)
    assert out["delivered"] == {"delivered": True, "model": SMOL}
    assert out["after"] == {"delivered": False}
    greedy, answer = out["greedy"]["choices"][0]["message"], out["answer"]["choices"][0]["message"]
    assert [c["function"] for c in answer["tool_calls"]] == [c["function"] for c in greedy["tool_calls"]]
    drafted = out["answer"]["usage"]["agentspec_decoding"]["drafted_by_source"]
    assert any(source.startswith("hint.speculator") for source in drafted), drafted
    assert out["stats"]["hints_delivered"] == 1


def test_a_named_request_on_the_plain_path_is_served_and_takes_no_hints(apps: dict[str, Any]) -> None:
    """A greedy server has no decoder context to register: the request id is accepted and ignored."""
    async def go() -> tuple[int, dict[str, Any]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps["greedy"]), base_url="http://t",
                                     timeout=300) as client:
            answer = await client.post("/v1/chat/completions", json={**BODY, "agentspec_request_id": "plain-1"})
            late = {"request_id": "plain-1", "predicted_calls": [WRONG]}
            return answer.status_code, (await client.post("/v1/agentspec/hints", json=late)).json()

    assert anyio.run(go) == (200, {"delivered": False})


@pytest.mark.parametrize("body, message", [
    ({"request_id": "r"}, "predicted_calls"),
    ({"request_id": "r", "predicted_calls": [{"name": "f", "arguments": {}, "source": "oracle"}]}, "source"),
    ({"request_id": "", "predicted_calls": [{"name": "f"}]}, "request_id"),
])
def test_a_malformed_hint_delivery_is_a_400_naming_the_field(apps: dict[str, Any], body: dict[str, Any],
                                                           message: str) -> None:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps["toolspec"]), base_url="http://t") as c:
            return await c.post("/v1/agentspec/hints", json=body)

    response = anyio.run(go)
    assert response.status_code == 400 and message in response.json()["error"]["message"]


def test_an_endpoint_without_the_hint_route_is_asked_once() -> None:
    """A plain OpenAI-compatible endpoint answers the first hint 404: the client sends it no more."""
    async def go(base_url: str) -> tuple[list[bool], int]:
        async with ModelClient(ModelConfig(base_url=base_url, model="scripted-model")) as client:
            sent = [await client.send_hints("r", [WRONG]), await client.send_hints("r", [WRONG])]
            return sent, client._hints_refused

    with ScriptedOpenAIServer(hint_route=False) as srv:
        assert anyio.run(go, srv.base_url) == ([False, False], True)
    with ScriptedOpenAIServer() as srv:  # a request that is not running: not taken, but the route is there
        assert anyio.run(go, srv.base_url) == ([False, False], False)
        assert len(srv.hints) == 2


def test_the_executor_hands_a_late_guess_to_the_running_authority_request(tau2_dir, capsys) -> None:
    plan = ["reset_apn_settings", "reboot_device", "done"]

    def responder(request: dict[str, Any]) -> dict[str, Any]:
        made = sum(1 for m in request["messages"] if m["role"] == "tool")
        reply: dict[str, Any] = {"tool_calls": [{"name": plan[min(made, 2)], "arguments": {}}]}
        if request["model"] == "authority":
            reply["delay_s"] = 0.5  # the authority is still decoding when the speculator's guess is ready
        return reply

    with ScriptedOpenAIServer(responder, models=("authority", "speculator")) as srv:
        code = main(["run", "--json", "--no-progress", "--bench", "tau2-telecom", "--task-ids",
                     "[service_issue]break_apn_settings[PERSONA:None]", "--solo", "--mode", "sequential,sa",
                     "--agent-model", f"{srv.base_url}#authority", "--speculator-model", f"{srv.base_url}#speculator",
                     "--speculator-hints", "--data-dir", str(tau2_dir)])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        summary = json.loads(captured.out.strip().splitlines()[-1])
        authority = {r["agentspec_request_id"]: r for r in srv.requests if r["model"] == "authority"}
    sa, sequential = summary["modes"]["sa"], summary["modes"]["sequential"]
    assert sa["reward_mean"] == sequential["reward_mean"] == 1.0
    assert sa["late_hints"] >= 1 and sa["late_hints_delivered"] == sa["late_hints"] == len(srv.hints)
    assert sequential["late_hints"] == 0
    for hint in srv.hints:  # each names the request deciding the step it predicts, and predicts its call
        request = authority[hint["request_id"]]
        made = sum(1 for m in request["messages"] if m["role"] == "tool")
        assert hint["predicted_calls"] == [{"name": plan[made], "arguments": {}, "source": "speculator"}]


def test_draft_first_waits_for_the_guess_and_sends_it_with_the_request(tau2_dir, tmp_path, capsys) -> None:
    """--draft-first: the speculator guesses, then the authority's request carries the guess from its start, and
    the two never decode at once (the speculator does not extend its chain while the authority decides)."""
    plan = ["reset_apn_settings", "reboot_device", "done"]
    spans: list[tuple[str, float, float]] = []

    def responder(request: dict[str, Any]) -> dict[str, Any]:
        made = sum(1 for m in request["messages"] if m["role"] == "tool")
        # The speculator is the slower one: without the wait, no guess would be ready in time.
        delay = 0.3 if request["model"] == "speculator" else 0.2
        now = time.monotonic()
        spans.append((request["model"], now, now + delay))
        return {"tool_calls": [{"name": plan[min(made, 2)], "arguments": {}}], "delay_s": delay}

    with ScriptedOpenAIServer(responder, models=("authority", "speculator")) as srv:
        code = main(["run", "--json", "--no-progress", "--bench", "tau2-telecom", "--task-ids",
                     "[service_issue]break_apn_settings[PERSONA:None]", "--solo", "--mode", "sa",
                     "--depth", "2", "--draft-first", "--agent-model", f"{srv.base_url}#authority",
                     "--speculator-model", f"{srv.base_url}#speculator", "--speculator-hints",
                     "--data-dir", str(tau2_dir), "--out", str(tmp_path)])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        summary = json.loads(captured.out.strip().splitlines()[-1])
        authority = [r for r in srv.requests if r["model"] == "authority"]
    sa = summary["modes"]["sa"]
    assert sa["reward_mean"] == 1.0 and sa["commits_sa"] == 2 and sa["late_hints"] == 0
    assert sa["mean_draft_wait_s"] >= 0.3
    for request, call in zip(authority, plan, strict=True):
        if call == "done":  # the speculator ended its chain: nothing to hint
            assert "agentspec_predicted_calls" not in request
        else:
            assert request["agentspec_predicted_calls"] == [{"name": call, "arguments": {}}]
    deciding = [(start, end) for model, start, end in spans if model == "authority"]
    guessing = [(start, end) for model, start, end in spans if model == "speculator"]
    assert len(guessing) >= 3 and not any(g0 < a1 and a0 < g1 for g0, g1 in guessing for a0, a1 in deciding)
