"""``agentspec serve --decoder toolspec``: same answers as greedy, per-request stats, hints; Qwen identity (slow)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from decoding_support import QWEN, SMOL, chat_prompt, local, plain_greedy
from local_models import WEATHER_TOOLS, apps_by_decoder, one_thread  # noqa: F401 - one_thread: a module fixture
from pydantic import BaseModel

from agentspec.cli import build_parser
from agentspec.decoding.decoder import ToolSpecDecoder, default_drafters
from agentspec.decoding.retrieval_drafter import CallHistory
from agentspec.engine.grammar import tool_grammar
from agentspec.serve.prompt import render_prompt
from agentspec.serve.protocol import ChatRequest

WEATHER = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
# A client's guess that is wrong about the city: the schema drafter already drafts everything a right guess would
# (the question's "Paris" included), so only a wrong one shows as drafted hint tokens; it must not change the answer.
HINT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}\n</tool_call>'


class Place(BaseModel):
    city: str
    unit: str


class Forecast(BaseModel):
    where: Place


# pydantic puts Place under "$defs" and reaches it with "$ref": the decoder's grammar must resolve it too.
DEFS_TOOLS = [{"type": "function", "function": {"name": "forecast", "parameters": Forecast.model_json_schema()}}]


@pytest.fixture(scope="module")
def apps() -> dict[str, Any]:
    return apps_by_decoder(SMOL)


def post(app: Any, body: dict[str, Any]) -> Any:
    async def go() -> Any:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=300) as client:
            response = await client.post("/v1/chat/completions", json={"model": SMOL, "temperature": 0, **body})
            return response.status_code, (response.text if body.get("stream") else response.json())

    return anyio.run(go)


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "user", "content": "Name three fruits."}], "max_tokens": 16, "logprobs": True},
    {"messages": WEATHER, "tools": WEATHER_TOOLS, "tool_choice": "required", "max_tokens": 60},
    {"messages": WEATHER, "tools": WEATHER_TOOLS, "tool_choice": "required", "max_tokens": 60,
     "agentspec_hints": [HINT]},
    {"messages": WEATHER, "tools": DEFS_TOOLS, "tool_choice": "required", "max_tokens": 60},
    {"messages": WEATHER, "tools": WEATHER_TOOLS, "tool_choice": "required", "max_tokens": 60,
     "agentspec_predicted_calls": [{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}]},
], ids=["text", "required-call", "with-hint", "defs-and-refs", "with-predicted-call"])
def test_toolspec_serves_the_greedy_answer_with_stats(apps: dict[str, Any], body: dict[str, Any]) -> None:
    status, greedy = post(apps["greedy"], body)
    status_t, toolspec = post(apps["toolspec"], body)
    assert status == status_t == 200
    assert toolspec["choices"][0]["message"] == {**greedy["choices"][0]["message"], **_ids(toolspec)}
    assert "agentspec_decoding" not in greedy["usage"]
    report = toolspec["usage"]["agentspec_decoding"]
    assert report["tokens"] == toolspec["usage"]["completion_tokens"] == greedy["usage"]["completion_tokens"]
    assert report["target_forwards"] >= 1 and report["tokens_per_forward"] > 0
    assert sum(report["accepted_by_source"].values()) == report["tokens"]
    if body.get("logprobs"):
        mine = [entry["logprob"] for entry in toolspec["choices"][0]["logprobs"]["content"]]
        theirs = [entry["logprob"] for entry in greedy["choices"][0]["logprobs"]["content"]]
        assert mine == pytest.approx(theirs, abs=1e-3)
    if body.get("tool_choice"):
        assert report["target_forwards"] * 2 < report["tokens"]
    if body.get("agentspec_hints"):
        assert any(source.startswith("hint.client") for source in report["drafted_by_source"])
    if body.get("agentspec_predicted_calls"):  # a speculator's (wrong) call is drafted, and changes nothing
        assert any(source.startswith("hint.speculator") for source in report["drafted_by_source"])


def _ids(response: dict[str, Any]) -> dict[str, Any]:
    """Tool call ids are random per answer: take the other answer's ids."""
    message = response["choices"][0]["message"]
    return {"tool_calls": message["tool_calls"]} if message.get("tool_calls") else {}


def test_streamed_toolspec_answer_and_sampled_requests_fall_back(apps: dict[str, Any]) -> None:
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 12}
    _, plain = post(apps["toolspec"], body)
    _, stream = post(apps["toolspec"], {**body, "stream": True, "stream_options": {"include_usage": True}})
    events = [json.loads(line[6:]) for line in stream.splitlines() if line.startswith("data: {")]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == plain["choices"][0]["message"]["content"]
    assert events[-1]["usage"]["agentspec_decoding"]["tokens"] == plain["usage"]["completion_tokens"]
    _, sampled = post(apps["toolspec"], {**body, "temperature": 0.8, "seed": 3})
    assert "agentspec_decoding" not in sampled["usage"]


def test_a_probe_hands_its_text_to_the_running_request_as_hints(apps: dict[str, Any]) -> None:
    """Partial-token accept: ``agentspec_hint_for`` turns a probe's text into draft hints of a running request."""
    app = apps["toolspec"]
    story = [{"role": "user", "content": "Tell me a story about a lighthouse."}]
    base = {"messages": story, "max_tokens": 120, "ignore_eos": True, "logprobs": True}
    _, alone = post(app, base)
    tokens = [entry["token"] for entry in alone["choices"][0]["logprobs"]["content"]]
    ahead = "".join(tokens[:40])  # a probe that already knows where the answer is going (a forced opening)

    async def go() -> tuple[Any, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=300) as client:
            answers: dict[str, Any] = {}

            async def authority() -> None:
                body = {"model": SMOL, "temperature": 0, **base, "agentspec_request_id": "authority-1"}
                answers["authority"] = (await client.post("/v1/chat/completions", json=body)).json()

            async with anyio.create_task_group() as group:
                group.start_soon(authority)
                while (await client.get("/stats")).json()[SMOL]["active"] == 0:
                    await anyio.sleep(0.01)
                probe = {"model": SMOL, "temperature": 0, "max_tokens": 10, "agentspec_hint_for": "authority-1",
                         "messages": [*story, {"role": "assistant", "content": ahead}],
                         "continue_final_message": True, "add_generation_prompt": False}
                answers["probe"] = (await client.post("/v1/chat/completions", json=probe)).json()
            return answers["authority"], (await client.get("/stats")).json()[SMOL]

    answer, counters = anyio.run(go)
    assert answer["choices"][0]["message"]["content"] == alone["choices"][0]["message"]["content"]
    assert counters["hints_forwarded"] >= 1
    accepted = answer["usage"]["agentspec_decoding"]["accepted_by_source"]
    assert accepted.get("hint.spork", 0) > 0, accepted


def test_serve_takes_a_decoder_flag() -> None:
    args = build_parser().parse_args(["serve", "--model", SMOL, "--decoder", "toolspec", "--sidecar"])
    assert args.decoder == "toolspec" and args.sidecar == "smollm2-135m"
    assert build_parser().parse_args(["serve", "--model", SMOL]).decoder == "greedy"


@pytest.mark.slow
def test_qwen_tree_decoding_is_greedy_token_for_token() -> None:
    """Qwen2.5-Coder-0.5B: required calls (one and parallel) and free text, against plain greedy."""
    lm = local(QWEN)
    history = CallHistory()
    decoder = ToolSpecDecoder(lm, default_drafters(history), history=history)
    functions = [tool["function"] for tool in WEATHER_TOOLS]
    cases = [
        ("What is the weather in Paris, in celsius? And what time is it in Tokyo?", True, 80),
        ("What is the weather in Rome in fahrenheit?", False, 60),
        ("What is the weather in Oslo in celsius?", False, 60),
    ]
    for question, parallel, limit in cases:
        request = ChatRequest.model_validate({"model": QWEN, "messages": [{"role": "user", "content": question}],
                                              "tools": WEATHER_TOOLS, "tool_choice": "required"})
        prompt = lm.encode(render_prompt(lm, request))
        grammar = tool_grammar(request.tools, ll_tokenizer=lm.ll_tokenizer, parallel=parallel)
        answer = plain_greedy(lm, prompt, limit, grammar)
        result = decoder.generate(prompt, max_tokens=limit, grammar=grammar, tools=functions)
        assert result.tokens == answer, result.stats.near_ties
        assert result.stats.forwards * 3 <= len(answer)
    prompt = chat_prompt(lm, "Write a Python function that adds two numbers.")
    answer = plain_greedy(lm, prompt, 48)
    assert decoder.generate(prompt, max_tokens=48).tokens == answer
