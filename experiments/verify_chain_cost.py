"""What verifying a chain costs against deciding its steps one by one (issue 29), on a local model; prints JSON.

    .venv/bin/python experiments/verify_chain_cost.py --model qwen2.5-coder-0.5b
    .venv/bin/python experiments/verify_chain_cost.py --model qwen2.5-coder-0.5b --bench workspace-demo --repeats 1

The model decides a 3-step weather/time task greedily under the tool grammar
(``tool_choice: required``) with fixed tool results; that chain of its own
calls is then (a) decided again step by step through ``/v1/chat/completions``
and (b) verified with one ``POST /v1/agentspec/verify_chain``.  Both start
from the same state, the one an agent is in when a macro fires: the prefix
cache holds the conversation before the first call (warmed by a one-token
request), nothing after it.  Each measurement repeats ``--repeats`` times
(interleaved, median reported); the server runs in-process (httpx's ASGI transport: no
sockets), on the engine ``agentspec serve`` uses.

With ``--bench workspace-demo`` the chain is a bench task's first ``--steps``
decisions instead, made the way ``agentspec run --solo`` makes them: through
:class:`~agentspec.runtime.policies.llm.LLMPolicy` (the bench's system prompt and
tools, ``tool_choice: required``, the history as ``history_messages`` renders
it) against ``agentspec serve`` on 127.0.0.1, each call executed in the task's
real workspace for its observation.  Step by step is ``LLMPolicy.decide`` at
each prefix; the verification is one ``LLMPolicy.verify_chain``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import anyio
import httpx

from agentspec.bench.registry import open_bench
from agentspec.engine.scheduler import Engine, PrefixCache
from agentspec.models import ModelClient, ModelConfig
from agentspec.runtime.policies.llm import LLMPolicy, history_messages
from agentspec.serve import ServerThread, create_app, load_engines
from agentspec.snapshot import SnapshotBackend
from agentspec.types import Observation, ToolCall, ToolSpec

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


# --- a workspace-demo task's own chain, through LLMPolicy ------------------------------------------------------------


class BenchChain:
    """A bench task's first decisions as ``agentspec run --solo`` makes them, against a served model."""

    def __init__(self, client: ModelClient, engine: Engine, prompt: str, tools: list[ToolSpec]) -> None:
        self.client, self.engine, self.prompt, self.tools = client, engine, prompt, tools
        self.chain: list[tuple[ToolCall, Observation]] = []

    def policy(self) -> LLMPolicy:
        """A fresh authority, configured as the assembly configures a solo one (nothing queued from earlier runs)."""
        return LLMPolicy(self.client, self.prompt, self.tools, tool_choice="required", temperature=0.0)

    async def build(self, live: SnapshotBackend, steps: int) -> None:
        """Let the model decide up to ``steps`` calls, each executed in the task's live workspace."""
        policy = self.policy()
        for _ in range(steps):
            decision = await policy.decide(self.chain)
            if decision.call is None:  # done (or no usable call): the chain ends here
                break
            self.chain.append((decision.call, await live.execute(decision.call)))

    async def warm(self) -> None:
        """Empty the prefix cache, then cache the conversation before the first call (a 1-token decision)."""
        self.engine.prefix_cache = PrefixCache(max_bytes=self.engine.prefix_cache.max_bytes)
        await self.client.chat(history_messages(self.prompt, []), tools=self.tools, tool_choice="required",
                               temperature=0.0, max_tokens=1)

    async def step_by_step(self) -> dict[str, Any]:
        await self.warm()
        policy, per_step, same = self.policy(), [], 0
        began = time.perf_counter()
        for index, (call, _) in enumerate(self.chain):
            started = time.perf_counter()
            decision = await policy.decide(self.chain[:index])
            per_step.append(time.perf_counter() - started)
            same += int(decision.call is not None and (decision.call.name, decision.call.arguments)
                        == (call.name, call.arguments))
        return {"seconds": time.perf_counter() - began, "per_step": per_step, "same_calls": same}

    async def verify(self) -> dict[str, Any]:
        await self.warm()
        began = time.perf_counter()
        verdict = await self.policy().verify_chain([], self.chain)
        return {"seconds": time.perf_counter() - began, "accepted": verdict.accepted, "steps": verdict.steps,
                "forwards": verdict.forwards, "prompt_tokens": verdict.prompt_tokens, "server_s": verdict.seconds}


async def measure_bench(model: str, decoder: str, repeats: int, bench_name: str, task_id: str | None,
                        steps: int) -> dict[str, Any]:
    bench = open_bench(bench_name)
    task = bench.task(task_id) if task_id else bench.tasks(bench.default_split)[0]
    engines = load_engines([model], decoder=decoder)
    with ServerThread(engines) as server:
        async with ModelClient(ModelConfig(base_url=server.base_url, model=model, timeout_s=3600,
                                           max_retries=0)) as client:
            runner = BenchChain(client, engines[model], bench.system_prompt(task, solo=True),
                                bench.tools(task, solo=True))
            async with bench.open_backend(task, solo=True) as live:
                await runner.build(live, steps)
            if not runner.chain:
                raise SystemExit(f"{model} made no call on {task.id}: no chain to verify")
            reason = await runner.policy().verification()  # the support probe, once per client, before timing
            if reason is not None:
                raise SystemExit(f"the endpoint cannot verify chains: {reason}")
            decoded, verified = [], []
            for _ in range(repeats):  # interleaved: both see the same machine (other load comes and goes)
                decoded.append(await runner.step_by_step())
                verified.append(await runner.verify())
    return bench_figures(model, decoder, task.id, runner.chain, decoded, verified)


def bench_figures(model: str, decoder: str, task_id: str, chain: list[tuple[ToolCall, Observation]],
                  decoded: list[dict[str, Any]], verified: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON a bench measurement prints: medians over the repeats, the last verification's counts."""
    decode_s = statistics.median(run["seconds"] for run in decoded)
    verify_s = statistics.median(run["seconds"] for run in verified)
    steps, last = len(chain), verified[-1]
    accepted = min(run["accepted"] for run in verified)
    same = min(run["same_calls"] for run in decoded)
    return {
        "model": model, "decoder": decoder, "bench": "workspace-demo", "task": task_id, "repeats": len(decoded),
        "steps": steps, "calls": [{"name": call.name, "arguments": call.arguments} for call, _ in chain],
        "observation_chars": [len(observation.content) for _, observation in chain],
        "observation_errors": [observation.error for _, observation in chain],
        "step_by_step_s": round(decode_s, 3),
        "step_by_step_per_step_s": [round(statistics.median(run["per_step"][i] for run in decoded), 3)
                                    for i in range(steps)],
        "step_by_step_same_calls": same,
        "verify_s": round(verify_s, 3), "verify_server_s": last["server_s"],
        "ratio_per_repeat": [round(v["seconds"] / d["seconds"], 3) for d, v in zip(decoded, verified)],
        "verify_over_step_by_step": round(verify_s / decode_s, 3),
        "accepted": accepted, "forwards": last["forwards"], "prompt_tokens": last["prompt_tokens"],
        "identical_decisions": same == steps and accepted == steps,
        "step_by_step_s_per_decided_step": round(decode_s / steps, 3),
        "verify_s_per_accepted_step": round(verify_s / max(1, accepted), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--decoder", choices=["greedy", "toolspec"], default="greedy")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bench", choices=["workspace-demo"], help="a bench task's own first decisions as the chain")
    parser.add_argument("--task", help="the bench task (default: its first)")
    parser.add_argument("--steps", type=int, default=3, help="decisions in the bench chain (2-3 in issue 29)")
    args = parser.parse_args()
    if args.repeats < 1 or not 1 <= args.steps <= 16:
        parser.error("--repeats must be >= 1 and --steps within 1..16")
    if args.bench:
        result = anyio.run(measure_bench, args.model, args.decoder, args.repeats, args.bench, args.task, args.steps)
    else:
        result = anyio.run(measure, args.model, args.decoder, args.repeats)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
