"""``POST /v1/agentspec/verify_chain`` equals step-by-step greedy decoding; capabilities; ``prompt_logprobs``.

The reference is the server's own chat endpoint, deciding each step greedily
under the tool grammar (``tool_choice: required``) exactly as an authority
does: a chain's accepted count must be the number of leading steps whose call
that decoding makes, and ``next_text`` must start what it writes next.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from decoding_support import SMOL, local, tiny_model
from local_models import WEATHER_TOOLS, apps_by_decoder, one_thread  # noqa: F401 - one_thread: a module fixture

from agentspec.decoding.decoder import ToolSpecDecoder
from agentspec.decoding.serving import ServingDecoder
from agentspec.engine.grammar import render_call
from agentspec.engine.scheduler import Engine
from agentspec.serve import create_app
from agentspec.serve.llama_cpp import ChatExtensions
from agentspec.serve.protocol import MAX_CHAIN_STEPS

QUESTION = [{"role": "user", "content": "What is the weather in Paris and in Rome, in celsius?"}]
# Fixed tool results: the first makes smollm2 switch tools, so the chain's steps call different functions.
OBSERVATIONS = ["Call get_time with zone Asia/Tokyo next.", "09:30", "Rome: 24 C, clear"]
# After the first call, this result makes smollm2 ask for Lyon instead of the time in Tokyo.
DIVERTING = "Error: unknown city. Did you mean Lyon?"


@pytest.fixture(scope="module")
def apps() -> dict[str, Any]:
    return apps_by_decoder(SMOL)


async def _call(app: Any, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=600) as client:
        return await client.request(method, path, json=body)


def request(app: Any, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    return anyio.run(_call, app, method, path, body)


def verify(app: Any, chain: list[dict[str, Any]], model: str = SMOL, tools: Any = None,
           messages: Any = None) -> dict[str, Any]:
    body = {"model": model, "messages": messages or QUESTION, "tools": tools or WEATHER_TOOLS, "chain": chain}
    response = request(app, "POST", "/v1/agentspec/verify_chain", body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _decision_body(messages: list[dict[str, Any]], model: str, tools: Any, max_tokens: int) -> dict[str, Any]:
    return {"model": model, "messages": messages, "tools": tools or WEATHER_TOOLS, "tool_choice": "required",
            "temperature": 0, "max_tokens": max_tokens, "logprobs": True}


def decide(app: Any, messages: list[dict[str, Any]], *, model: str = SMOL, tools: Any = None,
           max_tokens: int = 80) -> tuple[dict[str, Any] | None, str]:
    """The model's greedy decision at ``messages``: its call (arguments as written) and its raw text."""
    response = request(app, "POST", "/v1/chat/completions", _decision_body(messages, model, tools, max_tokens))
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    raw = "".join(entry["token"] for entry in choice["logprobs"]["content"])
    calls = choice["message"].get("tool_calls") or []
    if not calls or choice["finish_reason"] != "tool_calls":
        return None, raw
    return {"name": calls[0]["function"]["name"], "arguments": calls[0]["function"]["arguments"]}, raw


def step(call: dict[str, Any], observation: str, index: int) -> dict[str, Any]:
    """A chain step from a call as the model wrote it (``arguments`` a JSON text, keys in its order)."""
    function = {"name": call["name"], "arguments": call["arguments"]}
    return {"call": {"name": call["name"], "arguments": json.loads(call["arguments"])},
            "messages": [{"role": "assistant", "content": None,
                          "tool_calls": [{"id": f"call_{index}", "type": "function", "function": function}]},
                         {"role": "tool", "tool_call_id": f"call_{index}", "content": observation}]}


def conversation(chain: list[dict[str, Any]], upto: int, messages: Any = None) -> list[dict[str, Any]]:
    return [*(messages or QUESTION), *(m for s in chain[:upto] for m in s["messages"])]


def stepwise(app: Any, chain: list[dict[str, Any]], messages: Any = None, **options: Any) -> tuple[int, str | None]:
    """Decide each step by decoding it: how many leading steps make the chain's call, and the text of the first
    decision that does not."""
    for k, item in enumerate(chain):
        call, raw = decide(app, conversation(chain, k, messages), **options)
        wanted = render_call(item["call"]["name"], item["call"]["arguments"])
        if call is None or render_call(call["name"], json.loads(call["arguments"])) != wanted:
            return k, raw
    return len(chain), None


@dataclass
class Greedy:
    chain: list[dict[str, Any]]
    raws: list[str]
    """The model's text at each step (its call as it wrote it)."""
    next_raw: str
    """The model's first tokens after the whole chain."""


@pytest.fixture(scope="module")
def greedy(apps: dict[str, Any]) -> Greedy:
    """Three steps of smollm2's own greedy calls with fixed tool results, decoded through the server."""
    chain: list[dict[str, Any]] = []
    raws = []
    for index, observation in enumerate(OBSERVATIONS):
        call, raw = decide(apps["greedy"], conversation(chain, index))
        assert call is not None, raw
        chain.append(step(call, observation, index))
        raws.append(raw)
    _, next_raw = decide(apps["greedy"], conversation(chain, len(chain)), max_tokens=24)
    return Greedy(chain, raws, next_raw)


# ---------------------------------------------------------------- verdicts equal step-by-step decoding


def test_the_models_own_calls_are_all_accepted_in_one_forward(apps: dict[str, Any], greedy: Greedy) -> None:
    answer = verify(apps["greedy"], greedy.chain)
    assert (answer["accepted"], answer["steps"], answer["rejected_at"]) == (3, 3, None)
    assert answer["forwards"] <= 1 + answer["rechecks"], answer  # one, plus one per re-tokenised call rest
    assert answer["next_text"] and greedy.next_raw.startswith(answer["next_text"])
    assert 0 < answer["cached_tokens"] < answer["prompt_tokens"]  # the conversation came from the prefix cache
    assert answer["verify_s"] > 0


def test_another_function_at_step_k_is_rejected_there(apps: dict[str, Any], greedy: Greedy) -> None:
    chain = copy.deepcopy(greedy.chain)
    other = "get_weather" if chain[1]["call"]["name"] == "get_time" else "get_time"
    chain[1]["call"]["name"] = other
    chain[1]["messages"][0]["tool_calls"][0]["function"]["name"] = other
    answer = verify(apps["greedy"], chain)
    assert answer["accepted"] == stepwise(apps["greedy"], chain)[0] == 1
    rejected = answer["rejected_at"]
    assert rejected["step"] == 1 and other in rejected["expected_text"]
    assert rejected["greedy_text"] == answer["next_text"]
    assert greedy.raws[1].startswith(answer["next_text"])  # the model's own step-1 call, up to its first word
    assert answer["forwards"] <= 1 + answer["rechecks"]


def test_another_argument_value_is_rejected_inside_the_arguments(apps: dict[str, Any], greedy: Greedy) -> None:
    chain = copy.deepcopy(greedy.chain)
    arguments = chain[2]["call"]["arguments"]
    key = next(k for k, v in arguments.items() if isinstance(v, str))
    arguments[key] = "Tokyo" if arguments[key] != "Tokyo" else "Oslo"  # same tool, the call only (a tree forward)
    answer = verify(apps["greedy"], chain)
    accepted, raw = stepwise(apps["greedy"], chain)
    assert answer["accepted"] == accepted == 2
    assert raw is not None and raw.startswith(answer["next_text"])
    lm = local(SMOL)
    name = f'<tool_call>\n{{"name": "{chain[2]["call"]["name"]}"'
    assert answer["rejected_at"]["step"] == 2
    assert answer["rejected_at"]["token"] > len(lm.encode(name))
    assert answer["forwards"] <= 1 + answer["rechecks"]


def test_an_observation_that_changes_the_next_call_changes_the_verdict(apps: dict[str, Any], greedy: Greedy) -> None:
    chain = copy.deepcopy(greedy.chain)
    chain[0]["messages"][1]["content"] = DIVERTING
    accepted, raw = stepwise(apps["greedy"], chain)
    assert accepted == 1  # the same calls, but after this result the model asks for something else
    answer = verify(apps["greedy"], chain)
    assert answer["accepted"] == accepted
    assert answer["rejected_at"]["step"] == 1
    assert raw is not None and raw.startswith(answer["next_text"])


def test_the_toolspec_engine_gives_the_same_verdicts(apps: dict[str, Any], greedy: Greedy) -> None:
    diverted = copy.deepcopy(greedy.chain)
    diverted[0]["messages"][1]["content"] = DIVERTING
    keys = ("accepted", "rejected_at", "next_text")
    for chain in (greedy.chain, diverted):
        plain, toolspec = verify(apps["greedy"], chain), verify(apps["toolspec"], chain)
        assert {k: plain[k] for k in keys} == {k: toolspec[k] for k in keys}


def test_a_verification_beside_a_running_generation_changes_neither(apps: dict[str, Any], greedy: Greedy) -> None:
    app = apps["greedy"]
    alone = verify(app, greedy.chain)
    body = _decision_body(QUESTION, SMOL, None, 80)
    results: dict[str, Any] = {}

    async def both() -> None:
        async def run(name: str, path: str, payload: dict[str, Any]) -> None:
            results[name] = (await _call(app, "POST", path, payload)).json()

        async with anyio.create_task_group() as group:
            group.start_soon(run, "chat", "/v1/chat/completions", body)
            group.start_soon(run, "verify", "/v1/agentspec/verify_chain",
                             {"model": SMOL, "messages": QUESTION, "tools": WEATHER_TOOLS, "chain": greedy.chain})

    anyio.run(both)
    assert {k: results["verify"][k] for k in ("accepted", "next_text")} == \
        {k: alone[k] for k in ("accepted", "next_text")}
    raw = "".join(entry["token"] for entry in results["chat"]["choices"][0]["logprobs"]["content"])
    assert raw == greedy.raws[0]


def test_a_long_conversation_is_prefilled_in_chunks_and_the_accepted_path_is_cached(greedy: Greedy) -> None:
    engine = Engine(local(SMOL), prefill_chunk=64)  # a fresh prefix cache, and prompts of several chunks
    app = create_app({SMOL: engine})
    answer = verify(app, greedy.chain)
    assert (answer["accepted"], answer["next_text"]) == (3, verify(create_app({SMOL: Engine(local(SMOL))}),
                                                             greedy.chain)["next_text"])
    assert answer["cached_tokens"] == 0 and answer["forwards"] >= 4  # the prompt's chunks, then the chain
    body = _decision_body(conversation(greedy.chain, 3), SMOL, None, 4)
    usage = request(app, "POST", "/v1/chat/completions", body).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1  # the next decision
    assert engine.stats.steps >= 4 and engine.stats.active == 0


# A random-weight model writes odd token splits and near ties: the re-tokenising and recheck paths run.
SWITCHES = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {"mode": {"type": "string", "enum": ["low", "mid", "high", "max"]},
                                     "on": {"type": "boolean"}},
    "required": ["mode", "on"], "additionalProperties": False}}} for name in ("set_fan", "set_pump", "set_heat")]


def test_a_random_model_verifies_as_it_decodes_with_rechecks() -> None:
    tiny = tiny_model(local(SMOL), seed=3)
    # A wide near-tie margin sends many decisions through the plain recheck pass.
    decoder = ServingDecoder(ToolSpecDecoder(tiny, near_tie=0.5))
    apps = {"greedy": create_app({"tiny": Engine(tiny)}), "toolspec": create_app({"tiny": Engine(tiny, decoder=decoder)})}
    options = {"model": "tiny", "tools": SWITCHES, "messages": [{"role": "user", "content": "Cool the room."}]}
    chain: list[dict[str, Any]] = []
    for index, observation in enumerate(["ok", "the fan is loud", "done"]):
        call, raw = decide(apps["greedy"], conversation(chain, index, options["messages"]), model="tiny",
                           tools=SWITCHES)
        assert call is not None, raw
        chain.append(step(call, observation, index))
    variants = [chain, copy.deepcopy(chain)]
    variants[1][1]["call"]["arguments"]["on"] = not variants[1][1]["call"]["arguments"]["on"]
    rechecks = 0
    for variant in variants:
        accepted, raw = stepwise(apps["greedy"], variant, **options)
        for app in apps.values():
            answer = verify(app, variant, **options)
            assert answer["accepted"] == accepted
            if raw is not None:
                assert raw.startswith(answer["next_text"])
            rechecks += answer["rechecks"]
    assert rechecks > 0


# ---------------------------------------------------------------- bad requests, bounds, the other routes


@pytest.mark.parametrize(("change", "param"), [
    (lambda b: b["chain"][1]["call"].pop("name"), "chain.1.call.name"),
    (lambda b: b["chain"][0].update(observation="x"), "chain.0.observation"),
    (lambda b: b["chain"][0]["call"].update(arguments="{}"), "chain.0.call.arguments"),
    (lambda b: b["chain"][1]["messages"].append({"role": "robot", "content": "x"}), "chain.1.messages.2.role"),
    (lambda b: b.update(chain=[]), "chain"),
    (lambda b: b.pop("tools"), "tools"),
    (lambda b: b.update(chain=[b["chain"][0]] * (MAX_CHAIN_STEPS + 1)), "chain"),
], ids=["no-name", "unknown-field", "arguments-text", "bad-role", "empty", "no-tools", "too-long"])
def test_a_malformed_request_is_a_400_naming_the_field(apps: dict[str, Any], greedy: Greedy, change: Any,
                                                       param: str) -> None:
    body = {"model": SMOL, "messages": QUESTION, "tools": WEATHER_TOOLS, "chain": copy.deepcopy(greedy.chain)}
    change(body)
    response = request(apps["greedy"], "POST", "/v1/agentspec/verify_chain", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    if len(body.get("chain", [])) > MAX_CHAIN_STEPS:
        assert error["code"] == "chain_too_long"


def test_an_unknown_model_is_a_404(apps: dict[str, Any], greedy: Greedy) -> None:
    body = {"model": "nope", "messages": QUESTION, "tools": WEATHER_TOOLS, "chain": greedy.chain}
    response = request(apps["greedy"], "POST", "/v1/agentspec/verify_chain", body)
    assert response.status_code == 404 and response.json()["error"]["param"] == "model"


def test_a_chain_over_the_context_is_refused_before_any_model_work(apps: dict[str, Any], greedy: Greedy) -> None:
    chain = copy.deepcopy(greedy.chain)
    chain[0]["messages"][1]["content"] = "word " * 40_000  # smollm2 has 8,192 tokens of context
    response = request(apps["greedy"], "POST", "/v1/agentspec/verify_chain",
                       {"model": SMOL, "messages": QUESTION, "tools": WEATHER_TOOLS, "chain": chain})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


def test_capabilities_and_stats_report_verification(apps: dict[str, Any], greedy: Greedy) -> None:
    app = apps["greedy"]
    assert request(app, "GET", "/v1/agentspec/capabilities").json() == \
        {"verify_chain": True, "prompt_logprobs": True, "models": [SMOL]}
    before = request(app, "GET", "/stats").json()[SMOL]
    chain = copy.deepcopy(greedy.chain)
    chain[2]["call"]["name"] = "get_time" if chain[2]["call"]["name"] != "get_time" else "get_weather"
    assert verify(app, chain)["accepted"] == 2
    after = request(app, "GET", "/stats").json()[SMOL]
    assert after["chains_verified"] - before["chains_verified"] == 1
    assert after["chain_steps_accepted"] - before["chain_steps_accepted"] == 2
    assert after["chain_steps_rejected"] - before["chain_steps_rejected"] == 1
    assert after["active"] == 0


# ---------------------------------------------------------------- prompt_logprobs


def test_prompt_logprobs_rank_the_models_own_greedy_text_first(apps: dict[str, Any]) -> None:
    app = apps["greedy"]
    ask = [{"role": "user", "content": "Name three fruits."}]
    first = request(app, "POST", "/v1/chat/completions",
                    {"model": SMOL, "messages": ask, "temperature": 0, "max_tokens": 12, "logprobs": True}).json()
    generated = [entry["token"] for entry in first["choices"][0]["logprobs"]["content"]]
    text = "".join(generated)
    # The prompt ends with that text (the unfinished message continued): each of its tokens was the argmax.
    body = {"model": SMOL, "messages": [*ask, {"role": "assistant", "content": text}], "temperature": 0,
            "max_tokens": 1, "prompt_logprobs": 2, "continue_final_message": True, "add_generation_prompt": False}
    answer = request(app, "POST", "/v1/chat/completions", body).json()
    entries = answer["prompt_logprobs"]
    assert len(entries) == answer["usage"]["prompt_tokens"] and entries[0] is None
    tail = entries[-len(generated):]
    prompt_tokens = [next(iter(entry.values())) for entry in tail]  # the prompt token comes first in each entry
    assert [p["decoded_token"] for p in prompt_tokens] == generated
    assert all(p["rank"] == 1 for p in prompt_tokens)
    assert all(len(entry) <= 3 and all(v["logprob"] <= 0 for v in entry.values()) for entry in entries[1:])
    assert any(p["rank"] > 1 for entry in entries[1:] for p in [next(iter(entry.values()))])  # the user's words


def test_prompt_logprobs_are_bounded_and_need_a_whole_response(apps: dict[str, Any]) -> None:
    base = {"model": SMOL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    for extra in ({"prompt_logprobs": 21}, {"prompt_logprobs": -1}, {"prompt_logprobs": 1, "stream": True}):
        response = request(apps["greedy"], "POST", "/v1/chat/completions", {**base, **extra})
        assert response.status_code == 400 and response.json()["error"]["param"] == "prompt_logprobs"


# ---------------------------------------------------------------- llama.cpp says what it cannot do


def test_llama_cpp_reports_no_verification_and_answers_501() -> None:
    async def inner(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("nothing reaches llama.cpp")

    app = ChatExtensions(inner, get_proxy=lambda: None, models=["qwen2.5-coder-0.5b"])
    capabilities = request(app, "GET", "/v1/agentspec/capabilities").json()
    assert capabilities["verify_chain"] is False and capabilities["prompt_logprobs"] is False
    assert capabilities["models"] == ["qwen2.5-coder-0.5b"] and "logits_all" in capabilities["reason"]
    chain = request(app, "POST", "/v1/agentspec/verify_chain", {"model": "m", "chain": []})
    assert chain.status_code == 501 and chain.json()["error"]["code"] == "verify_chain_unsupported"
    chat = request(app, "POST", "/v1/chat/completions", {"model": "m", "messages": [], "prompt_logprobs": 1})
    assert chat.status_code == 501 and chat.json()["error"]["code"] == "prompt_logprobs_unsupported"
