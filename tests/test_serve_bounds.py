"""The server's bounds: hints (count, bytes, indexing off the engine step), request ids with one owner, schemas
with no finite value, the request body cap flag and the cap on requests in progress (issue 26, items 2, 8-10, 16).

Each bound answers a clear 4xx naming the field or flag, and none changes a greedy answer.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import anyio
import httpx
import pytest
from decoding_support import SMOL
from local_models import WEATHER_TOOLS, engines_by_decoder, one_thread  # noqa: F401 - one_thread: a module fixture

from agentspec.cli import build_parser
from agentspec.cli.commands.serve import serve_command
from agentspec.decoding import drafter as drafter_module
from agentspec.decoding.drafter import MAX_BOX_BYTES, MAX_BOX_HINTS, HintBox
from agentspec.serve import ServerThread, create_app
from agentspec.serve import server as server_module
from agentspec.serve.app import HINT_THREADS
from agentspec.serve.protocol import MAX_HINT_BYTES, MAX_HINTS, MAX_HINTS_BYTES
from agentspec.serve.schema_check import MAX_DEPTH, TooDeep, unsatisfiable

# A long answer (past end-of-sequence): the target request keeps running while others are sent.
TARGET = {"model": SMOL, "temperature": 0, "max_tokens": 45, "ignore_eos": True,
          "messages": [{"role": "user", "content": "Write a long story about the weather in Paris."}]}
BYSTANDER = {"model": SMOL, "temperature": 0, "tools": WEATHER_TOOLS, "tool_choice": "required", "max_tokens": 40,
             "messages": [{"role": "user", "content": "What time is it in Tokyo, on a 24-hour clock?"}]}
MESSAGES = [{"role": "user", "content": "Hi"}]

# An "A requires b, and b is an A" schema: no finite call matches it (issue 26, item 9).
ENDLESS = {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"],
           "$defs": {"A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/A"}}, "required": ["b"]}}}


@pytest.fixture(scope="module")
def engines() -> dict[str, Any]:
    return engines_by_decoder(SMOL)


def _noise(size: int, seed: int) -> str:
    """``size`` random hex digits (text no model predicts)."""
    return random.Random(seed).randbytes((size + 1) // 2).hex()[:size]


def _calls(count: int, size: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` predicted calls, each with an argument of ``size`` random characters (a wrong guess)."""
    return [{"name": "get_weather", "arguments": {"city": _noise(size, seed + i), "unit": "celsius"}}
            for i in range(count)]


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=300)


async def _started(client: httpx.AsyncClient, count: int = 1) -> None:
    """Wait until ``count`` requests are decoding (their prefill has begun, so their ids are registered)."""
    with anyio.fail_after(120):
        while (await client.get("/stats")).json()[SMOL]["active"] < count:
            await anyio.sleep(0.01)


def _call(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [c["function"] for c in answer["choices"][0]["message"]["tool_calls"]]


# ---------------------------------------------------------------- item 2: hints are bounded


@pytest.mark.parametrize("extra, status, param", [
    ({"agentspec_hints": ["x"] * (MAX_HINTS + 1)}, 400, "agentspec_hints"),
    ({"agentspec_predicted_calls": _calls(MAX_HINTS + 1, 4)}, 400, "agentspec_predicted_calls"),
    ({"agentspec_hints": ["ok", "x" * (MAX_HINT_BYTES + 1)]}, 413, "agentspec_hints.1"),
    ({"agentspec_hints": ["é" * (MAX_HINT_BYTES // 2 + 1)]}, 413, "agentspec_hints.0"),  # bytes, not characters
    ({"agentspec_predicted_calls": _calls(8, 460_000)}, 413, "agentspec_predicted_calls.0"),  # the issue's flood
    ({"agentspec_predicted_calls": _calls(MAX_HINTS, MAX_HINTS_BYTES // MAX_HINTS)}, 413, "agentspec_predicted_calls"),
    ({"agentspec_hints": ["x" * 30_000] * 4, "agentspec_predicted_calls": _calls(2, 30_000)}, 413,
     "agentspec_hints, agentspec_predicted_calls"),
])
def test_oversize_hints_in_a_chat_request_are_refused_naming_the_field(
    engines: dict[str, Any], extra: dict[str, Any], status: int, param: str
) -> None:
    async def go() -> httpx.Response:
        async with _client(create_app(engines["toolspec"])) as client:
            return await client.post("/v1/chat/completions", json={**BYSTANDER, **extra})

    response = anyio.run(go)
    error = response.json()["error"]
    assert response.status_code == status, error
    assert error["param"] == param and param.split(",")[0].split(".")[0] in error["message"]
    assert status == 400 or error["code"] == "hints_too_large"


@pytest.mark.parametrize("calls, status, param", [
    (_calls(MAX_HINTS + 1, 4), 400, "predicted_calls"),
    (_calls(8, 460_000), 413, "predicted_calls.0"),
    (_calls(MAX_HINTS, MAX_HINTS_BYTES // MAX_HINTS), 413, "predicted_calls"),
])
def test_an_oversize_hint_delivery_is_refused_naming_the_field(
    engines: dict[str, Any], calls: list[dict[str, Any]], status: int, param: str
) -> None:
    async def go() -> httpx.Response:
        async with _client(create_app(engines["toolspec"])) as client:
            return await client.post("/v1/agentspec/hints", json={"request_id": "r", "predicted_calls": calls})

    response = anyio.run(go)
    assert response.status_code == status and response.json()["error"]["param"] == param


def test_a_hint_box_takes_a_bounded_number_of_bytes_and_hints_all_or_nothing() -> None:
    box = HintBox(max_hints=3, max_bytes=10)
    assert box.put("abcd") and box.put("efgh")
    assert not box.put("ijk")  # 11 bytes in all: refused whole
    assert box.put("ij") and not box.put("k")  # 3 hints: full
    assert [hint.text for hint in box.snapshot()] == ["abcd", "efgh", "ij"] and box.size == (3, 10)
    assert all(hint.index is not None for hint in box.snapshot())  # indexed when put, not when drafted
    assert MAX_BOX_HINTS >= 2 * MAX_HINTS and MAX_BOX_BYTES >= MAX_HINTS_BYTES


def test_a_hint_flood_costs_only_its_own_request_and_changes_no_answer(engines: dict[str, Any]) -> None:
    """The issue's flood (posts of 8 random 460 kB arguments) to a running request, and floods within the bounds
    until its box is full: a bystander's time stays near its time beside the same request unflooded."""
    app = create_app(engines["toolspec"])
    # Encoded once here: the client shares the server's event loop, and its encoding is no cost of the server's.
    oversize = json.dumps({"request_id": "flooded", "predicted_calls": _calls(8, 460_000)}).encode()
    # 8 calls of about 15 kB: within a delivery's bounds; the box is full after two of them.
    within = json.dumps({"request_id": "flooded",
                         "predicted_calls": _calls(8, MAX_HINTS_BYTES // MAX_HINTS - 1_000, seed=99)}).encode()

    async def bystander(client: httpx.AsyncClient, out: dict[str, Any], key: str) -> None:
        start = time.perf_counter()
        out[key] = (await client.post("/v1/chat/completions", json=BYSTANDER)).json()
        out[f"{key}_s"] = time.perf_counter() - start

    async def target(client: httpx.AsyncClient, out: dict[str, Any], key: str) -> None:
        start = time.perf_counter()
        body = {**TARGET, "agentspec_request_id": "flooded"}
        out[key] = (await client.post("/v1/chat/completions", json=body)).json()
        out[f"{key}_s"] = time.perf_counter() - start

    async def flood(client: httpx.AsyncClient, out: dict[str, Any]) -> None:
        start = time.perf_counter()
        out["oversize"] = [(await client.post("/v1/agentspec/hints", content=oversize)).status_code for _ in range(4)]
        answers = [await client.post("/v1/agentspec/hints", content=within) for _ in range(3)]
        out["within"] = [(a.status_code, a.json().get("delivered")) for a in answers]
        out["flood_s"] = time.perf_counter() - start

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with _client(app) as client:
            await bystander(client, out, "alone")  # (for the record: it also pays the one-time costs)
            for run in ("beside", "flooded"):
                async with anyio.create_task_group() as group:
                    group.start_soon(target, client, out, f"target_{run}")
                    await _started(client)
                    if run == "flooded":
                        group.start_soon(flood, client, out)
                    await bystander(client, out, run)
                    out[f"{run}_target_running"] = (await client.get("/stats")).json()[SMOL]["active"] == 1
        return out

    out = anyio.run(go)
    assert out["flooded_target_running"] and out["beside_target_running"]  # the bystander ran beside it throughout
    assert out["oversize"] == [413] * 4 and out["within"] == [(200, True), (200, True), (413, None)], out["within"]
    ratio = out["flooded_s"] / out["beside_s"]
    print(f"bystander alone {out['alone_s']:.2f} s, beside the target {out['beside_s']:.2f} s, "
          f"beside the flooded target {out['flooded_s']:.2f} s (x{ratio:.2f}); target {out['target_beside_s']:.2f} s, "
          f"flooded {out['target_flooded_s']:.2f} s; flood {out['flood_s']:.2f} s")
    assert out["flooded_s"] < 3 * out["beside_s"] + 1, ratio  # a second of slack for a loaded machine's noise
    assert _call(out["flooded"]) == _call(out["beside"]) == _call(out["alone"])
    assert out["target_flooded"]["choices"] == out["target_beside"]["choices"]
    drafted = out["target_flooded"]["usage"]["agentspec_decoding"]["drafted_by_source"]
    assert any(source.startswith("hint.speculator") for source in drafted), drafted


def test_concurrent_deliveries_do_not_stall_a_bystander_and_a_full_box_refuses_before_indexing(
    engines: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 deliveries at once to a running request whose box takes two of them: deliveries past the box's room are
    refused without being indexed, past MAX_HINT_DELIVERIES in progress they get a 429, and a bystander's time stays
    within the flood test's bound."""
    indexed: list[int] = []
    real = drafter_module.Hint.indexed.__func__  # type: ignore[attr-defined]

    def counting(cls: type, text: str, source: str) -> Any:  # the real indexing, counted
        indexed.append(len(text))
        return real(cls, text, source)

    monkeypatch.setattr(drafter_module.Hint, "indexed", classmethod(counting))
    app = create_app(engines["toolspec"])
    within = json.dumps({"request_id": "busy",
                         "predicted_calls": _calls(8, MAX_HINTS_BYTES // MAX_HINTS - 1_000, seed=7)}).encode()

    async def timed(client: httpx.AsyncClient, out: dict[str, Any], key: str, body: dict[str, Any]) -> None:
        start = time.perf_counter()
        out[key] = (await client.post("/v1/chat/completions", json=body)).json()
        out[f"{key}_s"] = time.perf_counter() - start

    async def deliver(client: httpx.AsyncClient, out: dict[str, Any]) -> None:
        answer = await client.post("/v1/agentspec/hints", content=within)
        out["deliveries"].append((answer.status_code, answer.json().get("delivered")))

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {"deliveries": []}
        target = {**TARGET, "agentspec_request_id": "busy"}
        async with _client(app) as client:
            await timed(client, out, "alone", BYSTANDER)  # pays the one-time costs
            for run in ("beside", "flooded"):
                async with anyio.create_task_group() as group:
                    group.start_soon(timed, client, out, f"target_{run}", target)
                    await _started(client)
                    if run == "flooded":
                        for _ in range(16):
                            group.start_soon(deliver, client, out)
                    await timed(client, out, run, BYSTANDER)
                    if run == "flooded":
                        with anyio.fail_after(60):
                            while len(out["deliveries"]) < 16:
                                await anyio.sleep(0.01)
                        before = len(indexed)
                        late = await client.post("/v1/agentspec/hints", content=within)
                        out["late"] = (late.status_code, len(indexed) - before)
                    out[f"{run}_target_running"] = (await client.get("/stats")).json()[SMOL]["active"] == 1
        return out

    out = anyio.run(go)
    statuses = sorted(status for status, _ in out["deliveries"])
    print(f"bystander beside {out['beside_s']:.2f} s, flooded {out['flooded_s']:.2f} s; statuses {statuses}; "
          f"{len(indexed)} hints indexed")
    assert out["flooded_target_running"] and out["beside_target_running"]
    assert out["deliveries"].count((200, True)) == 2 and set(statuses) <= {200, 413, 429}, statuses
    assert 429 in statuses  # more than MAX_HINT_DELIVERIES at once
    # Only deliveries that found room were indexed: the two taken, and at most HINT_THREADS racing them.
    assert len(indexed) <= (2 + HINT_THREADS) * 8, len(indexed)
    assert out["late"] == (413, 0)  # a full box refuses before indexing
    assert out["flooded_s"] < 3 * out["beside_s"] + 1
    assert _call(out["flooded"]) == _call(out["beside"]) and out["target_flooded"]["choices"] == \
        out["target_beside"]["choices"]


def test_an_engine_step_does_not_wait_for_the_default_worker_threads(engines: dict[str, Any]) -> None:
    """With every thread of anyio's default limiter held (prep and deliveries run there), a running request
    still finishes: its steps run on the engine's own thread."""
    app = create_app(engines["greedy"])

    async def go() -> int:
        async with _client(app) as client, anyio.create_task_group() as group:
            out: dict[str, int] = {}

            async def target() -> None:
                out["status"] = (await client.post("/v1/chat/completions", json={**TARGET, "max_tokens": 8})).status_code

            group.start_soon(target)
            await _started(client)
            limiter = anyio.to_thread.current_default_thread_limiter()
            holders = [object() for _ in range(int(limiter.total_tokens))]
            for holder in holders:
                await limiter.acquire_on_behalf_of(holder)
            try:
                with anyio.fail_after(60):
                    while "status" not in out:
                        await anyio.sleep(0.01)
            finally:
                for holder in holders:
                    limiter.release_on_behalf_of(holder)
        return out["status"]

    assert anyio.run(go) == 200


# ---------------------------------------------------------------- item 8: one owner per request id


def test_a_running_request_id_has_one_owner_and_its_hints_go_to_it(engines: dict[str, Any]) -> None:
    app = create_app(engines["toolspec"])
    late = {"request_id": "owner", "predicted_calls": [
        {"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}]}

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with _client(app) as client:

            async def owner() -> None:
                body = {**TARGET, "max_tokens": 60, "agentspec_request_id": "owner"}
                out["owner"] = (await client.post("/v1/chat/completions", json=body)).json()

            async with anyio.create_task_group() as group:
                group.start_soon(owner)
                await _started(client)
                thief = await client.post("/v1/chat/completions", json={**BYSTANDER, "agentspec_request_id": "owner"})
                out["thief"] = (thief.status_code, thief.json())
                out["delivered"] = (await client.post("/v1/agentspec/hints", json=late)).json()
            # Once the owner is done, the id is free again.
            again = await client.post("/v1/chat/completions", json={**BYSTANDER, "agentspec_request_id": "owner"})
            out["again"] = (again.status_code, again.json())
        return out

    out = anyio.run(go)
    status, body = out["thief"]
    assert status == 409 and body["error"]["code"] == "request_id_in_use"
    assert body["error"]["param"] == "agentspec_request_id" and "'owner'" in body["error"]["message"]
    assert out["delivered"] == {"delivered": True, "model": SMOL}
    drafted = out["owner"]["usage"]["agentspec_decoding"]["drafted_by_source"]
    assert any(source.startswith("hint.speculator") for source in drafted), drafted
    assert out["again"][0] == 200


# ---------------------------------------------------------------- item 9: a schema with no finite value


def test_an_unsatisfiable_recursive_schema_is_a_400_invalid_schema(engines: dict[str, Any]) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": ENDLESS}}]

    async def go() -> list[httpx.Response]:
        async with _client(create_app(engines["greedy"])) as client:
            return [await client.post("/v1/chat/completions", json={
                "model": SMOL, "messages": MESSAGES, "tools": tools, "tool_choice": choice, "max_tokens": 5})
                for choice in ("required", "auto")]

    for response in anyio.run(go):
        error = response.json()["error"]
        assert response.status_code == 400 and error["code"] == "invalid_schema", error
        assert error["param"] == "tools[0].function.parameters" and "#/$defs/A" in error["message"]


@pytest.mark.parametrize("schema", [
    # A tree: children are optional, or an array that may be empty.
    {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}, "required": ["kids"]},
    {"type": "object", "properties": {"next": {"$ref": "#"}}},
    {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["next"]},
    {"type": "object", "properties": {"a": {"$ref": "https://example.com/remote"}}, "required": ["a"]},
])
def test_recursive_schemas_with_finite_values_are_kept(schema: dict[str, Any]) -> None:
    assert unsatisfiable(schema) is None


@pytest.mark.parametrize("schema", [
    ENDLESS,
    {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]},
    {"type": "object", "properties": {"a": {"type": "array", "minItems": 1, "items": {"$ref": "#"}}},
     "required": ["a"]},
    {"type": "object", "properties": {"a": {"anyOf": [{"$ref": "#"}, False]}}, "required": ["a"]},
])
def test_schemas_with_no_finite_value_are_found(schema: dict[str, Any]) -> None:
    assert unsatisfiable(schema) is not None


def _nested_allof(levels: int) -> str:
    """An object schema inside ``levels`` single-part ``allOf``s, as JSON text (too deep for ``json.dumps``)."""
    return '{"allOf": [' * levels + '{"type": "object"}' + "]}" * levels


def _ref_chain(length: int) -> dict[str, Any]:
    """A shallow schema whose ``$ref``s expand ``length`` levels deep (each definition refers to the next)."""
    defs = {f"A{i}": {"$ref": f"#/$defs/A{i + 1}"} for i in range(length)}
    return {"type": "object", "properties": {"a": {"$ref": "#/$defs/A0"}}, "required": ["a"],
            "$defs": {**defs, f"A{length}": {"type": "string"}}}


@pytest.mark.parametrize("parameters, detail", [
    (_nested_allof(400), "levels of objects and arrays"),  # was a RecursionError: a 500
    (json.dumps(_ref_chain(1500)), "levels of subschemas and $refs"),  # shallow JSON: a RecursionError too
])
def test_a_too_deeply_nested_schema_is_a_400_invalid_schema(
    engines: dict[str, Any], parameters: str, detail: str
) -> None:
    body = (f'{{"model": "{SMOL}", "messages": {json.dumps(MESSAGES)}, "max_tokens": 5, "tool_choice": "required", '
            f'"tools": [{{"type": "function", "function": {{"name": "f", "parameters": {parameters}}}}}]}}')

    async def go() -> httpx.Response:
        async with _client(create_app(engines["greedy"])) as client:
            return await client.post("/v1/chat/completions", content=body.encode())

    response = anyio.run(go)
    error = response.json()["error"]
    assert response.status_code == 400 and error["code"] == "invalid_schema", error
    assert error["param"] == "tools[0].function.parameters" and "too deeply nested" in error["message"]
    assert detail in error["message"]


def test_a_ref_chain_within_the_depth_cap_is_checked() -> None:
    assert unsatisfiable(_ref_chain(MAX_DEPTH // 2)) is None
    assert unsatisfiable({**_ref_chain(MAX_DEPTH // 2), "$defs": _ref_chain(MAX_DEPTH // 2)["$defs"] | {
        f"A{MAX_DEPTH // 2}": {"$ref": "#/$defs/A0"}}}) is not None  # a loop through the whole chain
    with pytest.raises(TooDeep):
        unsatisfiable(_ref_chain(MAX_DEPTH + 1))


# ---------------------------------------------------------------- items 10 and 16: the serve flags


def _served_app(monkeypatch: pytest.MonkeyPatch, argv: list[str], engines: dict[str, Any] | None = None) -> Any:
    """The app ``agentspec serve --model M ARGV`` builds over ``engines`` (none loaded; nothing served)."""
    served: dict[str, Any] = {}

    def keep(server: Any, sock: Any, models: list[str]) -> None:
        sock.close()
        served["app"] = server.config.app

    monkeypatch.setattr(server_module, "load_engines", lambda *args, **kwargs: engines or {})
    monkeypatch.setattr(server_module, "serve_until_stopped", keep)
    serve_command(build_parser().parse_args(["serve", "--model", "m", "--port", "0", *argv]))
    return served["app"]


def test_serve_takes_max_request_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    async def post(app: Any, size: int) -> httpx.Response:
        async with _client(app) as client:
            return await client.post("/v1/chat/completions", content=b" " * size)

    app = _served_app(monkeypatch, ["--max-request-bytes", "200"])
    refused = anyio.run(post, app, 201)
    assert refused.status_code == 413 and "limit of 200 bytes" in refused.json()["error"]["message"]
    assert anyio.run(post, app, 200).status_code == 400  # read, and found not to be JSON
    default = _served_app(monkeypatch, [])
    assert anyio.run(post, default, 201).status_code == 400


def test_serve_flags_refuse_a_limit_below_one() -> None:
    from agentspec.errors import UsageError

    for flag in ("--max-request-bytes", "--max-queued-requests"):
        with pytest.raises(UsageError, match=flag):
            build_parser().parse_args(["serve", "--model", "m", flag, "0"])


def test_requests_past_the_queue_limit_get_a_429_with_retry_after(
    engines: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _served_app(monkeypatch, ["--max-queued-requests", "2"], engines["greedy"])

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {"first": []}
        async with _client(app) as client:

            async def first() -> None:
                body = {**TARGET, "max_tokens": 30}
                out["first"].append((await client.post("/v1/chat/completions", json=body)).status_code)

            async with anyio.create_task_group() as group:
                group.start_soon(first)
                group.start_soon(first)
                await _started(client, 2)
                busy = await client.post("/v1/chat/completions", json=BYSTANDER)
                out["busy"] = (busy.status_code, busy.headers.get("retry-after"), busy.json())
                out["hints"] = (await client.post("/v1/agentspec/hints", json={
                    "request_id": "r", "predicted_calls": _calls(1, 4)})).status_code  # not a chat request
            out["after"] = (await client.post("/v1/chat/completions", json=BYSTANDER)).status_code
        return out

    out = anyio.run(go)
    status, retry_after, body = out["busy"]
    assert status == 429 and retry_after == "1" and body["error"]["code"] == "server_busy"
    assert "--max-queued-requests" in body["error"]["message"]
    assert out["first"] == [200, 200] and out["hints"] == 200 and out["after"] == 200


def test_the_client_retries_a_request_whose_id_is_still_held(engines: dict[str, Any]) -> None:
    """A retried attempt may find its earlier attempt still holding the id on the server (409 request_id_in_use):
    the client tries again, as for a busy server, and gets the answer once the id is free."""
    from agentspec.models import ModelClient, ModelConfig
    from agentspec.types import Message

    body = {**TARGET, "max_tokens": 30, "agentspec_request_id": "held"}

    async def go(base_url: str) -> tuple[int, str, bool]:
        config = ModelConfig(base_url=base_url, model=SMOL, max_retries=20, backoff_s=0.5, backoff_max_s=1)
        async with ModelClient(config) as client, httpx.AsyncClient(base_url=base_url, timeout=300) as raw:
            async with anyio.create_task_group() as group:

                async def holder() -> None:
                    out["holder"] = (await raw.post("/chat/completions", json=body)).status_code
                    out["holder_done"] = time.monotonic()

                out: dict[str, Any] = {}
                group.start_soon(holder)
                with anyio.fail_after(60):
                    while (await raw.get(base_url.removesuffix("/v1") + "/stats")).json()[SMOL]["active"] == 0:
                        await anyio.sleep(0.01)
                result = await client.chat([Message(role="user", content="Hi")], max_tokens=5,
                                           extra_body={"agentspec_request_id": "held"})
                answered = time.monotonic()
            # A 5-token answer that came only after the 30-token holder ended: it was refused while the id was held.
            return out["holder"], result.message.content or "", out["holder_done"] < answered

    with ServerThread(engines["toolspec"]) as server:
        status, text, waited = anyio.run(go, server.base_url)
    assert status == 200 and text and waited
