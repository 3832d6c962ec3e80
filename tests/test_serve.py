"""The real local-model server (smollm2-135m on the CPU) on 127.0.0.1, driven by the openai SDK."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import openai
import pytest
from local_models import WEATHER_TOOLS, served, stats, validate
from pydantic import BaseModel

from agentspec.models import ModelClient, ModelConfig
from agentspec.serve import ServerThread
from agentspec.serve.app import DEFAULT_MAX_REQUEST_BYTES
from agentspec.serve.completions import PROBE_CHARS_PER_TOKEN
from agentspec.types import Message

MODEL = "smollm2-135m"
CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with served(MODEL) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120) as sdk:
        yield sdk


def ask(client: openai.OpenAI, messages: list[dict[str, Any]] = CAPITAL, **kwargs: Any) -> Any:
    kwargs.setdefault("max_tokens", 12)
    kwargs.setdefault("temperature", 0)
    return client.chat.completions.create(model=MODEL, messages=messages, **kwargs)


def test_models_are_listed(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_greedy_is_deterministic_and_the_repeat_hits_the_prefix_cache(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Name three colours of the rainbow."}]
    first, second = ask(client, messages), ask(client, messages)
    assert first.choices[0].message.content == second.choices[0].message.content
    assert first.choices[0].message.content
    assert first.usage.completion_tokens == second.usage.completion_tokens <= 12
    # the whole prompt but its last token comes from the cache the first request left
    assert second.usage.prompt_tokens_details.cached_tokens == second.usage.prompt_tokens - 1


def test_shared_prefix_is_reused_across_different_questions(client: openai.OpenAI) -> None:
    system = {"role": "system", "content": "You are a terse geography tutor. " * 30}
    first = ask(client, [system, {"role": "user", "content": "Capital of Spain?"}], max_tokens=2)
    second = ask(client, [system, {"role": "user", "content": "Capital of Italy?"}], max_tokens=2)
    shared = first.usage.prompt_tokens - 10
    assert second.usage.prompt_tokens_details.cached_tokens >= shared


def test_seeded_sampling_repeats(client: openai.OpenAI) -> None:
    runs = [ask(client, temperature=1.0, seed=7, max_tokens=10).choices[0].message.content for _ in range(2)]
    assert runs[0] == runs[1]


def test_stop_string_cuts_the_text(client: openai.OpenAI) -> None:
    full = ask(client).choices[0].message.content
    word = full.split()[2]
    cut = ask(client, stop=[word])
    assert cut.choices[0].message.content == full[: full.index(word)]
    assert cut.choices[0].finish_reason == "stop"


def test_length_limit_and_ignore_eos(client: openai.OpenAI) -> None:
    answer = ask(client, max_tokens=20, extra_body={"ignore_eos": True})
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 20


def test_logprobs_shape(client: openai.OpenAI) -> None:
    answer = ask(client, logprobs=True, top_logprobs=3)
    content = answer.choices[0].logprobs.content
    assert len(content) == answer.usage.completion_tokens
    assert "".join(item.token for item in content) == answer.choices[0].message.content
    for item in content:
        assert item.logprob <= 0 and bytes(item.bytes).decode() == item.token
        assert len(item.top_logprobs) == 3
        values = [top.logprob for top in item.top_logprobs]
        assert values == sorted(values, reverse=True)
        # greedy: the chosen token is the most likely one
        assert item.top_logprobs[0].token == item.token and item.top_logprobs[0].logprob == pytest.approx(item.logprob)


def test_streaming_matches_the_plain_answer(client: openai.OpenAI) -> None:
    plain = ask(client)
    chunks = list(ask(client, stream=True, stream_options={"include_usage": True}, logprobs=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [plain.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    streamed_logprobs = [item for c in chunks if c.choices and c.choices[0].logprobs for item in c.choices[0].logprobs.content]
    assert len(streamed_logprobs) == plain.usage.completion_tokens


def test_required_call_is_constrained_to_the_schema(client: openai.OpenAI) -> None:
    answer = ask(client, WEATHER, tools=WEATHER_TOOLS, tool_choice="required", max_tokens=60)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in WEATHER_TOOLS}
    assert call.function.name in schemas
    validate(json.loads(call.function.arguments), schemas[call.function.name])


def test_named_function_is_the_one_called(client: openai.OpenAI) -> None:
    choice = {"type": "function", "function": {"name": "get_time"}}
    answer = ask(client, WEATHER, tools=WEATHER_TOOLS, tool_choice=choice, max_tokens=60)
    call = answer.choices[0].message.tool_calls[0]
    assert call.function.name == "get_time"
    validate(json.loads(call.function.arguments), WEATHER_TOOLS[1]["function"]["parameters"])


def test_streamed_required_call_arrives_as_tool_call_deltas(client: openai.OpenAI) -> None:
    chunks = list(ask(client, WEATHER, tools=WEATHER_TOOLS, tool_choice="required", max_tokens=60, stream=True))
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert len(deltas) == 1 and deltas[0].id and deltas[0].function.name in {"get_weather", "get_time"}
    json.loads(deltas[0].function.arguments)
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_earlier_calls_and_results_render_for_a_template_without_tools(client: openai.OpenAI) -> None:
    history = [
        *WEATHER,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18 degrees, sunny"},
    ]
    answer = ask(client, history, tools=WEATHER_TOOLS, tool_choice="none", max_tokens=8)
    assert answer.choices[0].message.tool_calls is None
    assert answer.choices[0].message.content


def test_model_client_reads_the_server(server: ServerThread) -> None:
    async def main() -> Any:
        async with ModelClient(ModelConfig(base_url=server.base_url, max_tokens=8)) as model:
            return await model.chat([Message(role="user", content="Say hello.")])

    result = anyio.run(main)
    assert result.model == MODEL and result.message.content and result.usage.prompt_tokens > 0


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"model": "nope", "messages": CAPITAL}, 404, "model_not_found"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}, 400, None),
        ({"model": MODEL, "messages": []}, 400, None),
        ({"model": MODEL, "messages": [{"role": "user"}]}, 400, None),
        ({"model": MODEL, "messages": CAPITAL, "max_tokens": 10_000}, 400, "context_length_exceeded"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "word " * 9000}]}, 400, "context_length_exceeded"),
        ({"model": MODEL, "messages": CAPITAL, "tools": [{"type": "function", "function": {
            "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "bogus"}}}}}]}, 400, "invalid_schema"),
        ({"model": MODEL, "messages": CAPITAL, "tools": [{"type": "function", "function": {
            "name": "f", "parameters": {"type": "string"}}}]}, 400, "invalid_schema"),
        ({"model": MODEL, "messages": CAPITAL, "tools": WEATHER_TOOLS,
          "tool_choice": {"type": "function", "function": {"name": "nope"}}}, 400, None),
        ({"model": MODEL, "messages": CAPITAL, "tool_choice": "required"}, 400, None),
        ({"model": MODEL, "messages": CAPITAL, "temperature": -1}, 400, None),
    ],
)
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(
    client: openai.OpenAI, server: ServerThread, body: dict[str, Any], status: int, code: str | None
) -> None:
    answer = httpx.post(server.base_url + "/chat/completions", json=body, timeout=60)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert error["message"] and error["type"] and error["code"] == code
    assert ask(client, max_tokens=1).choices[0].message.content is not None


def test_openai_sdk_sees_typed_errors(client: openai.OpenAI, server: ServerThread) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=CAPITAL)
    with pytest.raises(openai.BadRequestError, match="context length"):
        ask(client, max_tokens=100_000)
    assert httpx.post(server.base_url + "/chat/completions", content=b"{oops").status_code == 400
    assert httpx.get(server.base_url + "/nope").json()["error"]["type"] == "not_found_error"
    assert httpx.get(server.base_url + "/chat/completions").status_code == 405


def test_concurrent_requests_match_their_sequential_answers(server: ServerThread, client: openai.OpenAI) -> None:
    questions = ["What is 2 + 2?", "Name a fruit.", "Who wrote Hamlet?"]
    alone = [ask(client, [{"role": "user", "content": q}], max_tokens=10).choices[0].message.content for q in questions]

    async def main() -> list[str | None]:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0) as sdk:
            results: list[str | None] = [None] * len(questions)

            async def one(index: int) -> None:
                answer = await sdk.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": questions[index]}], max_tokens=10, temperature=0
                )
                results[index] = answer.choices[0].message.content

            async with anyio.create_task_group() as group:
                for index in range(len(questions)):
                    group.start_soon(one, index)
            return results

    assert anyio.run(main) == alone


def _wait_idle(server: ServerThread, within_s: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while (now := stats(server, MODEL))["active"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


def test_disconnect_cancels_a_streamed_generation(server: ServerThread, client: openai.OpenAI) -> None:
    before = _wait_idle(server)
    stream = ask(client, max_tokens=4000, stream=True, extra_body={"ignore_eos": True})
    for received, _ in enumerate(stream):
        if received == 5:
            break
    stream.close()
    after = _wait_idle(server)
    assert after["active"] == 0 and after["cancelled"] == before["cancelled"] + 1
    assert after["generated_tokens"] - before["generated_tokens"] < 500


def test_disconnect_cancels_a_plain_generation(server: ServerThread) -> None:
    before = _wait_idle(server)
    body = {"model": MODEL, "messages": CAPITAL, "max_tokens": 4000, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.base_url + "/chat/completions", json=body, timeout=httpx.Timeout(60, read=1.0))
    after = _wait_idle(server)
    assert after["active"] == 0 and after["cancelled"] == before["cancelled"] + 1
    assert after["generated_tokens"] - before["generated_tokens"] < 500


def _story(client: openai.OpenAI, max_tokens: int) -> tuple[Any, list[str]]:
    reply = ask(client, [{"role": "user", "content": "Tell me a story about a lighthouse."}], max_tokens=max_tokens,
                logprobs=True, extra_body={"ignore_eos": True})
    return reply, [entry.token for entry in reply.choices[0].logprobs.content]


def test_continue_final_message_goes_on_from_the_unfinished_answer(client: openai.OpenAI) -> None:
    whole, tokens = _story(client, 14)
    cut = "".join(tokens[:6])
    messages = [{"role": "user", "content": "Tell me a story about a lighthouse."}, {"role": "assistant", "content": cut}]
    rest = ask(client, messages, max_tokens=8, extra_body={
        "continue_final_message": True, "add_generation_prompt": False, "ignore_eos": True})
    assert rest.choices[0].message.content == "".join(tokens[6:14])
    # The whole first answer is in the prefix cache: only the last prompt token is computed again.
    assert rest.usage.prompt_tokens == whole.usage.prompt_tokens + 6
    assert rest.usage.prompt_tokens_details.cached_tokens == rest.usage.prompt_tokens - 1


@pytest.mark.parametrize("extra, message", [
    ({"continue_final_message": True}, "needs add_generation_prompt false"),
    ({"continue_final_message": True, "add_generation_prompt": False}, "needs a last assistant message"),
])
def test_continuation_needs_an_unfinished_assistant_message(
    client: openai.OpenAI, extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(openai.BadRequestError, match=message):
        ask(client, CAPITAL, extra_body=extra)


def test_a_probe_forked_from_a_running_answer_reuses_its_cache(server: ServerThread, client: openai.OpenAI) -> None:
    question = [{"role": "user", "content": "Describe the sea in many words."}]
    prompt_tokens = ask(client, question, max_tokens=1).usage.prompt_tokens
    stream = ask(client, question, max_tokens=3000, stream=True, extra_body={"ignore_eos": True})
    partial = ""
    for chunk in stream:
        partial += chunk.choices[0].delta.content or "" if chunk.choices else ""
        if len(partial) > 40:
            break
    probe = ask(client, [*question, {"role": "assistant", "content": partial}], max_tokens=2,
                extra_body={"continue_final_message": True, "add_generation_prompt": False})
    running = stats(server, MODEL)["active"]
    stream.close()
    assert running == 1, "the answer being forked from should still be running"
    # Everything the running answer had computed up to the fork point is reused (the retokenized
    # boundary may cost a token or two).
    cached = probe.usage.prompt_tokens_details.cached_tokens
    assert cached > prompt_tokens + 4 and cached >= probe.usage.prompt_tokens - 3
    _wait_idle(server)


# ---------------------------------------------------------------- hardening (issue 13: items 5, 6, 11)


def _post(server: ServerThread, content: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(server.base_url + "/chat/completions", content=content, timeout=60, **kwargs)


def test_a_body_over_the_cap_is_a_413_before_it_is_read(server: ServerThread, client: openai.OpenAI) -> None:
    # 12 MB used to be read whole and tokenised for 10 s before a 400, and the memory was never given back.
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 12_000_000}]}).encode()
    before = stats(server, MODEL)
    started = time.monotonic()
    declared = _post(server, body)
    chunked = _post(server, (body[i : i + 1 << 20] for i in range(0, len(body), 1 << 20)))  # no Content-Length
    assert time.monotonic() - started < 5
    for answer in (declared, chunked):
        assert answer.status_code == 413, answer.text
        error = answer.json()["error"]
        assert error["code"] == "request_too_large" and str(DEFAULT_MAX_REQUEST_BYTES) in error["message"]
    assert stats(server, MODEL)["prompt_tokens"] == before["prompt_tokens"]
    assert ask(client, max_tokens=1).choices[0].message.content is not None


def test_the_body_cap_is_configurable() -> None:
    with ServerThread({}, max_request_bytes=200) as small:
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 300}]})
        assert _post(small, body).status_code == 413
        assert _post(small, json.dumps({"model": MODEL, "messages": CAPITAL})).status_code == 404  # read, then no model


@pytest.mark.parametrize("size", [1_000_000, 200_000], ids=["bounded-by-bytes", "counted-on-a-prefix"])
def test_an_over_long_prompt_is_refused_before_it_is_tokenised(
    server: ServerThread, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    lm = server.engines[MODEL].lm
    tokenised: list[int] = []

    def encode(text: str) -> list[int]:  # the real tokenizer, recording how much text it was given
        tokenised.append(len(text))
        return type(lm).encode(lm, text)

    monkeypatch.setattr(lm, "encode", encode)
    words = "the quick brown fox jumps over the lazy dog " * (size // 44)
    answer = httpx.post(server.base_url + "/chat/completions", timeout=60,
                        json={"model": MODEL, "messages": [{"role": "user", "content": words}]})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded" and "maximum context length is 8192 tokens" in error["message"]
    assert all(length <= lm.context_length * PROBE_CHARS_PER_TOKEN for length in tokenised), tokenised


@pytest.mark.parametrize(("field", "value"), [
    ("seed", 10**26), ("seed", -(2**63) - 1), ("seed", 2**64), ("max_tokens", 10**26), ("max_tokens", 0),
    ("max_completion_tokens", 10**20), ("temperature", float("nan")), ("temperature", float("inf")),
    ("temperature", 2.5), ("top_p", float("nan")), ("top_p", 0), ("n", 10**26), ("top_logprobs", 10**26),
    ("top_logprobs", -1), ("logprobs", [1]),
])
def test_out_of_range_numbers_are_a_400_naming_the_field(server: ServerThread, field: str, value: Any) -> None:
    # 10**26 as a seed used to overflow inside the sampler: a 500.
    body = json.dumps({"model": MODEL, "messages": CAPITAL, "max_tokens": 1, field: value})  # NaN/Infinity as Python writes them
    answer = _post(server, body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == field and error["message"].startswith(f"invalid request: {field}: ")


def test_the_extreme_seeds_the_sampler_takes_are_served(client: openai.OpenAI) -> None:
    for seed in (2**64 - 1, -(2**63)):
        assert ask(client, temperature=1.0, seed=seed, max_tokens=2).choices[0].message.content is not None


@pytest.mark.parametrize(("content", "message"), [
    (b"[" * 100_000, "nested too deeply"),
    (json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "a\ud800b"}]}).encode(), "not Unicode"),
])
def test_malformed_bodies_are_a_400_not_a_500(server: ServerThread, content: bytes, message: str) -> None:
    answer = _post(server, content)
    assert answer.status_code == 400 and message in answer.json()["error"]["message"]


class Address(BaseModel):
    city: str
    unit: str


class Forecast(BaseModel):
    """A pydantic-generated schema: the nested model is a $defs entry that properties reach by "$ref"."""

    where: Address
    also: list[Address] = []


def test_a_tool_schema_with_defs_and_refs_constrains_the_call(client: openai.OpenAI) -> None:
    parameters = Forecast.model_json_schema()
    assert "$defs" in parameters and parameters["properties"]["where"] == {"$ref": "#/$defs/Address"}
    tool = {"type": "function", "function": {"name": "forecast", "description": "Weather forecast.",
                                             "parameters": parameters}}
    answer = ask(client, WEATHER, tools=[tool], tool_choice="required", max_tokens=80)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.function.name == "forecast"
    Forecast.model_validate_json(call.function.arguments)  # the grammar followed the referenced definitions
