"""Target forwards per call with a head guess as a decoder hint from the first forward: right, wrong, none.

The first decision of each workspace-demo task (the agent's real request: the solo system prompt, the workspace
tools plus ``done``, ``tool_choice`` required, greedy, ``max_tokens`` 128) is prepared exactly as
``agentspec serve --decoder toolspec`` prepares a chat request (:func:`agentspec.serve.completions.prepare`:
prompt, tool grammar, hints from ``agentspec_predicted_calls``) and decoded four ways on one model:

* ``plain``: the server's plain greedy path (one forward per token), the reference every other way must equal;
* ``none``: the ToolSpec decoder without a hint;
* ``right``: with the call ``none`` made as ``agentspec_predicted_calls`` (a speculator's right guess);
* ``wrong``: with that call wrong in one argument value (a string changed, a boolean flipped, a number moved).

Every way starts from the same cached prompt (all but its last token prefilled once per decision), and the
ToolSpec ways each get a fresh decoder (priors only, an empty call history), so no way learns from another.
A forward is counted as ``DraftStats.forwards`` counts it (the server's ``agentspec_decoding.target_forwards``):
the prompt's last token and first output token is one, each tree verification one more.

    python experiments/hint_forwards.py --model qwen2.5-coder-1.5b --tasks 6

The last stdout line is JSON: per decision the forwards, tree nodes and seconds of each way, whether it equals
plain greedy, and the mean forwards per call by way.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from typing import Any

from agentspec.decoding.decoder import ToolSpecDecoder, default_drafters
from agentspec.decoding.retrieval_drafter import CallHistory
from agentspec.decoding.serving import ServingDecoder
from agentspec.engine.generation import TokenStream, drain
from agentspec.engine.kv_cache import TargetSequence
from agentspec.models.parsing import to_openai_messages
from agentspec.runtime.policies.llm import history_messages
from agentspec.serve.completions import Prepared, prepare
from agentspec.serve.server import load_engines
from envs.workspace.bench import WorkspaceBench

WAYS = ("plain", "none", "right", "wrong")


def body(model: str, system: str, tools: list[dict[str, Any]], predicted: dict[str, Any] | None) -> bytes:
    request: dict[str, Any] = {
        "model": model, "messages": to_openai_messages(history_messages(system, [])), "tools": tools,
        "tool_choice": "required", "temperature": 0, "max_tokens": 128,
    }
    if predicted is not None:
        request["agentspec_predicted_calls"] = [predicted]
    return json.dumps(request).encode()


def run(stream: TokenStream) -> list[int]:
    return [token.id for token in drain(stream)]


def decode(prepared: Prepared, reuse: tuple[int, Any], toolspec: bool) -> dict[str, Any]:
    lm = prepared.engine.lm
    history = CallHistory()
    serving = ServingDecoder(ToolSpecDecoder(lm, default_drafters(history), history=history))
    began = time.perf_counter()
    stream = serving.start(lm, prepared.prompt, prepared.params, reuse=reuse, constraint=prepared.constraint,
                           context=prepared.context if toolspec else None)
    tokens = run(stream)
    seconds = time.perf_counter() - began
    text = lm.tokenizer.decode(tokens)
    if not toolspec:
        return {"tokens": tokens, "text": text, "forwards": len(tokens), "seconds": round(seconds, 2)}
    assert prepared.context is not None and prepared.context.stats is not None
    report = prepared.context.stats.as_dict()
    return {"tokens": tokens, "text": text, "forwards": report["target_forwards"],
            "tree_nodes_per_forward": report["tree_nodes_per_forward"], "seconds": round(seconds, 2),
            "accepted_by_source": report["accepted_by_source"]}


def wrong_in_one_argument(call: dict[str, Any]) -> dict[str, Any]:
    """``call`` with its first argument's value changed (a string, a boolean, a number), or one argument added."""
    arguments = dict(call["arguments"])
    if not arguments:
        return {"name": call["name"], "arguments": {"path": "nowhere"}}
    key, value = next(iter(arguments.items()))
    if isinstance(value, bool):
        arguments[key] = not value
    elif isinstance(value, int | float):
        arguments[key] = value + 1
    else:
        arguments[key] = "nowhere" if value != "nowhere" else "elsewhere"
    return {"name": call["name"], "arguments": arguments}


def parse_call(text: str) -> dict[str, Any]:
    inner = text.strip().removeprefix("<tool_call>").removesuffix("</tool_call>").strip()
    parsed = json.loads(inner)
    return {"name": parsed["name"], "arguments": parsed.get("arguments", {})}


def main(args: argparse.Namespace) -> dict[str, Any]:
    engines = load_engines([args.model], decoder="toolspec")
    model = next(iter(engines))
    lm = engines[model].lm
    bench = WorkspaceBench()
    decisions = []
    for task in bench.tasks(bench.default_split)[: args.tasks]:
        tools = [tool.openai_schema() for tool in bench.tools(task, solo=True)]
        system = bench.system_prompt(task, solo=True)
        bare = prepare(body(model, system, tools, None), engines, 128)
        seq = TargetSequence(lm)
        began = time.perf_counter()
        seq.prefill(bare.prompt[:-1])
        prefill_s = time.perf_counter() - began
        reuse = (len(bare.prompt) - 1, seq.layers())
        # Each way is prepared afresh: its grammar matcher is consumed as it decodes.
        request = functools.partial(body, model, system, tools)
        ways: dict[str, dict[str, Any]] = {}
        if args.plain:
            ways["plain"] = decode(prepare(request(None), engines, 128), reuse, toolspec=False)
        ways["none"] = decode(prepare(request(None), engines, 128), reuse, toolspec=True)
        call = parse_call(ways["none"]["text"])
        hints = {"right": call, "wrong": wrong_in_one_argument(call)}
        for way, predicted in hints.items():
            ways[way] = decode(prepare(request(predicted), engines, 128), reuse, toolspec=True)
        reference = ways["plain"]["tokens"] if "plain" in ways else ways["none"]["tokens"]
        entry = {"task": task.id, "prompt_tokens": len(bare.prompt), "prefill_s": round(prefill_s, 1),
                 "call": ways["none"]["text"], "output_tokens": len(ways["none"]["tokens"]),
                 "wrong_hint": hints["wrong"], "equal_to_reference": {w: v["tokens"] == reference for w, v in ways.items()}}
        for way, result in ways.items():
            entry[way] = {k: v for k, v in result.items() if k not in ("tokens", "text")}
        decisions.append(entry)
        print(json.dumps(entry), flush=True)
    summary = {way: round(statistics.mean(d[way]["forwards"] for d in decisions), 2)
               for way in WAYS if all(way in d for d in decisions)}
    return {"model": args.model, "decisions": decisions, "mean_forwards_per_call": summary,
            "all_equal": all(all(d["equal_to_reference"].values()) for d in decisions)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--tasks", type=int, default=6, help="first decisions of this many workspace-demo tasks")
    parser.add_argument("--no-plain", dest="plain", action="store_false",
                        help="skip the plain greedy reference (compare with the hint-free ToolSpec run instead)")
    print(json.dumps(main(parser.parse_args())))
