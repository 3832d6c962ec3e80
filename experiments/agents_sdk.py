"""An OpenAI Agents SDK agent run through agentspec's adapter, sequential vs sa, with simulated latency.

    .venv/bin/python experiments/agents_sdk.py [--tool-s 0.2] [--model-s 0.3] [--repeats 3]

The agent (three read-only ``weather`` calls, one external ``send_report``, then a text answer) is unchanged
between modes; its model is the project's scripted OpenAI-compatible server on 127.0.0.1 answering after
``--model-s`` seconds, its tools sleep ``--tool-s`` seconds, and the speculator is a second scripted endpoint that
knows the script (answers at once): an upper bound on what a speculator can save here.  Prints one JSON line:
median wall time per mode, the calls committed ahead of the authority (from a fork), and whether every mode made
the same calls with the same results and answer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, function_tool
from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from scripted_openai_server import ScriptedOpenAIServer  # noqa: E402 - the test server, reused as the model

from agentspec import ModelConfig  # noqa: E402
from agentspec.integrations.agents_sdk import AgentExecutor, AgentRunResult, effect  # noqa: E402

CITIES = ["Paris", "Rome", "Oslo"]


def _results(request: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in request["messages"] if m["role"] == "tool"]


def model(delay_s: float) -> Any:
    """The agent's model: one weather call per city, the report, then the answer."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        seen = _results(request)
        if len(seen) < len(CITIES):
            reply: dict[str, Any] = {"tool_calls": [{"name": "weather", "arguments": {"city": CITIES[len(seen)]}}]}
        elif len(seen) == len(CITIES):
            reply = {"tool_calls": [{"name": "send_report", "arguments": {"text": " | ".join(seen)}}]}
        else:
            reply = {"content": "Report sent."}
        return {**reply, "delay_s": delay_s}

    return answer


def speculator(request: dict[str, Any]) -> dict[str, Any]:
    """Guesses the next weather call (and nothing after them)."""
    seen = _results(request)
    if len(seen) < len(CITIES):
        return {"tool_calls": [{"name": "weather", "arguments": {"city": CITIES[len(seen)]}}]}
    return {"content": "no guess"}


def agent(base_url: str, tool_s: float) -> Agent[Any]:
    @function_tool
    @effect("read_only")
    def weather(city: str) -> str:
        """Today's weather in a city."""
        time.sleep(tool_s)
        return f"{city}: sunny"

    @function_tool
    def send_report(text: str) -> str:
        """Send the report (external: never speculated)."""
        time.sleep(tool_s)
        return "sent"

    client = AsyncOpenAI(base_url=base_url, api_key="scripted")
    return Agent(name="weather", instructions="Compare the cities' weather and send one report.",
                 tools=[weather, send_report], model=OpenAIChatCompletionsModel(model="scripted-model",
                                                                               openai_client=client))


def trace(result: AgentRunResult) -> list[Any]:
    return [(s.call.name, s.call.arguments, s.observation.content) for s in result.steps] + [result.final_output]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tool-s", type=float, default=0.2)
    parser.add_argument("--model-s", type=float, default=0.3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"sequential": [], "sa": []}
    ahead: dict[str, int] = {}
    traces = []
    with ScriptedOpenAIServer(model(args.model_s)) as srv, ScriptedOpenAIServer(speculator) as spec:
        for _ in range(args.repeats):
            for mode in times:
                guesser = ModelConfig(base_url=spec.base_url, model="scripted-model") if mode == "sa" else None
                executor = AgentExecutor(agent(srv.base_url, args.tool_s), mode=mode, speculator=guesser)
                started = time.perf_counter()
                result = executor.run_sync("Compare Paris, Rome and Oslo, then send the report.")
                times[mode].append(time.perf_counter() - started)
                ahead[mode] = sum(1 for s in result.steps if s.source != "authority")
                traces.append(trace(result))
    sequential, sa = statistics.median(times["sequential"]), statistics.median(times["sa"])
    print(json.dumps({"tool_s": args.tool_s, "model_s": args.model_s, "repeats": args.repeats,
                      "steps": len(traces[0]) - 1, "sequential_s": round(sequential, 3), "sa_s": round(sa, 3),
                      "saved": round(1 - sa / sequential, 3), "committed_ahead_sa": ahead["sa"],
                      "same_result": all(t == traces[0] for t in traces)}))


if __name__ == "__main__":
    main()
