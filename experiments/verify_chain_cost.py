"""What verifying a chain costs against deciding its steps one by one (issue 29), on a local model; prints JSON.

    .venv/bin/python experiments/verify_chain_cost.py --model qwen2.5-coder-0.5b

The model decides a 3-step weather/time task greedily under the tool grammar
(``tool_choice: required``) with fixed tool results; that chain of its own
calls is then (a) decided again step by step through ``/v1/chat/completions``
and (b) verified with one ``POST /v1/agentspec/verify_chain``.  Both start
from the same state, the one an agent is in when a macro fires: the prefix
cache holds the conversation before the first call (warmed by a one-token
request), nothing after it.  Each measurement repeats ``--repeats`` times
(interleaved, median reported); the server runs in-process (httpx's ASGI transport: no
sockets), on the engine ``agentspec serve`` uses.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import anyio
import httpx

from agentspec.serve import create_app, load_engines
from agentspec.serve.engine import Engine, PrefixCache

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Local time in a time zone.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                       "required": ["zone"], "additionalProperties": False}}},
]
QUESTION = [{"role": "system", "content": "You are a travel assistant. Answer with tool calls, one at a time."},
            {"role": "user", "content": "What is the weather in Paris and in Rome, in celsius? "
                                        "Then tell me the local time in Europe/Rome."}]
OBSERVATIONS = ['{"city": "Paris", "temperature": 18, "sky": "sunny"}',
                '{"city": "Rome", "temperature": 24, "sky": "clear"}',
                '{"zone": "Europe/Rome", "time": "14:05"}']


class Bench:
    """The in-process server and the model's own chain."""

    def __init__(self, client: httpx.AsyncClient, model: str, engine: Engine) -> None:
        self.client, self.model, self.engine = client, model, engine
        self.chain: list[dict[str, Any]] = []

    async def decide(self, messages: list[dict[str, Any]], max_tokens: int = 96) -> dict[str, Any]:
        body = {"model": self.model, "messages": messages, "tools": TOOLS, "tool_choice": "required",
                "temperature": 0, "max_tokens": max_tokens}
        response = await self.client.post("/v1/chat/completions", json=body)
        response.raise_for_status()
        return dict(response.json())

    def conversation(self, upto: int) -> list[dict[str, Any]]:
        return [*QUESTION, *(m for step in self.chain[:upto] for m in step["messages"])]

    async def build_chain(self) -> None:
        for index, observation in enumerate(OBSERVATIONS):
            answer = await self.decide(self.conversation(index))
            function = answer["choices"][0]["message"]["tool_calls"][0]["function"]
            self.chain.append({
                "call": {"name": function["name"], "arguments": json.loads(function["arguments"])},
                "messages": [{"role": "assistant", "content": None, "tool_calls": [
                                 {"id": f"call_{index}", "type": "function", "function": function}]},
                             {"role": "tool", "tool_call_id": f"call_{index}", "content": observation}]})

    async def warm(self) -> None:
        """Empty the prefix cache, then cache the conversation before the first call (a 1-token decision)."""
        self.engine.prefix_cache = PrefixCache(max_bytes=self.engine.prefix_cache.max_bytes)
        await self.decide(self.conversation(0), max_tokens=1)

    async def step_by_step(self) -> dict[str, Any]:
        await self.warm()
        began = time.perf_counter()
        per_step = []
        same = 0
        for index, step in enumerate(self.chain):
            started = time.perf_counter()
            answer = await self.decide(self.conversation(index))
            per_step.append(time.perf_counter() - started)
            function = answer["choices"][0]["message"]["tool_calls"][0]["function"]
            same += int(function["name"] == step["call"]["name"]
                        and json.loads(function["arguments"]) == step["call"]["arguments"])
        return {"seconds": time.perf_counter() - began, "per_step": per_step, "same_calls": same}

    async def verify(self) -> dict[str, Any]:
        await self.warm()
        began = time.perf_counter()
        response = await self.client.post("/v1/agentspec/verify_chain", json={
            "model": self.model, "messages": QUESTION, "tools": TOOLS, "chain": self.chain})
        response.raise_for_status()
        return {"seconds": time.perf_counter() - began, **response.json()}


async def measure(model: str, decoder: str, repeats: int) -> dict[str, Any]:
    engines = load_engines([model], decoder=decoder)
    app = create_app(engines)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench",
                                 timeout=3600) as client:
        bench = Bench(client, model, engines[model])
        await bench.build_chain()
        decoded, verified = [], []
        for _ in range(repeats):  # interleaved: both see the same machine (other load comes and goes)
            decoded.append(await bench.step_by_step())
            verified.append(await bench.verify())
    decode_s = statistics.median(run["seconds"] for run in decoded)
    verify_s = statistics.median(run["seconds"] for run in verified)
    last = verified[-1]
    return {
        "model": model, "decoder": decoder, "repeats": repeats, "steps": len(bench.chain),
        "calls": [step["call"] for step in bench.chain],
        "step_by_step_s": round(decode_s, 3),
        "step_by_step_per_step_s": [round(statistics.median(run["per_step"][i] for run in decoded), 3)
                                    for i in range(len(bench.chain))],
        "step_by_step_same_calls": min(run["same_calls"] for run in decoded),
        "verify_s": round(verify_s, 3),
        "ratio_per_repeat": [round(v["seconds"] / d["seconds"], 3) for d, v in zip(decoded, verified)],
        "verify_over_step_by_step": round(verify_s / decode_s, 3),
        "accepted": last["accepted"], "forwards": last["forwards"], "rechecks": last["rechecks"],
        "prompt_tokens": last["prompt_tokens"], "cached_tokens": last["cached_tokens"],
        "verify_s_per_accepted_step": round(verify_s / max(1, last["accepted"]), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--decoder", choices=["greedy", "toolspec"], default="greedy")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(anyio.run(measure, args.model, args.decoder, args.repeats), indent=1))


if __name__ == "__main__":
    main()
