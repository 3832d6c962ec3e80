"""Local models behind `agentspec serve`: speed, prefix-cache gain, and BFCL valid-call rates. Prints one JSON object.

Everything goes through the real server (in-process, on 127.0.0.1) and the
openai SDK, one request at a time:

* decode tokens/s (a streamed answer with ``ignore_eos``, first to last token)
  and prefill tokens/s (a fresh ~1,000-token prompt, one completion token);
* latency of a ~1,500-token request whose prefix is cached vs the same request
  uncached, and their ratio;
* on BFCL ``simple_python`` (the first ``--limit``, default 100): how often the
  model answers with a valid call of the right tool (parsed, right name,
  arguments valid for the schema), free (``tool_choice: auto``) vs
  grammar-constrained (``required``), with the exact-argument match against
  BFCL's possible answers on the side.

    python experiments/local_models.py --models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b --bfcl-dir ../shared/data/bfcl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import openai

from agentspec.models.registry import pull
from agentspec.serve import ServerThread, load_engines

BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


def json_schema(bfcl: dict[str, Any]) -> dict[str, Any]:
    """A BFCL parameter schema as JSON schema (``dict`` -> ``object``, ``float`` -> ``number``, ...)."""
    out = dict(bfcl)
    if "type" in out:
        kind = BFCL_TYPES.get(out["type"], out["type"])
        if kind is None:
            del out["type"]
        else:
            out["type"] = kind
    if isinstance(out.get("properties"), dict):
        out["properties"] = {key: json_schema(value) for key, value in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = json_schema(out["items"])
    return out


def valid(value: Any, schema: dict[str, Any]) -> bool:
    """Whether ``value`` follows ``schema`` (types, enum, required, items, additionalProperties false)."""
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}
    kind = schema.get("type")
    if kind in kinds and (not isinstance(value, kinds[kind]) or (kind in ("integer", "number") and isinstance(value, bool))):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        if not set(schema.get("required", [])) <= set(value):
            return False
        if schema.get("additionalProperties") is False and not set(value) <= set(properties):
            return False
        return all(valid(item, properties[key]) for key, item in value.items() if key in properties)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return all(valid(item, schema["items"]) for item in value)
    return True


def matches_answer(arguments: dict[str, Any], answer: dict[str, list[Any]]) -> bool:
    """BFCL-style: each given argument is one of the allowed values; omitted ones must allow ""."""
    for key, allowed in answer.items():
        if key in arguments:
            if arguments[key] not in allowed and not (isinstance(arguments[key], float) and arguments[key] in allowed):
                return False
        elif "" not in allowed:
            return False
    return set(arguments) <= set(answer)


def load_bfcl(folder: Path, limit: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    questions = [json.loads(line) for line in (folder / "BFCL_v4_simple_python.json").read_text().splitlines()[:limit]]
    answers = {
        row["id"]: row
        for row in map(json.loads, (folder / "possible_answer" / "BFCL_v4_simple_python.json").read_text().splitlines())
    }
    return [(question, answers[question["id"]]) for question in questions]


def bfcl_rate(sdk: openai.OpenAI, model: str, items: list[tuple[dict[str, Any], dict[str, Any]]], choice: str,
              max_tokens: int) -> dict[str, Any]:
    valid_calls = right_args = 0
    started = time.perf_counter()
    for done, (question, answer) in enumerate(items):
        if done and done % 10 == 0:
            print(f"  {model} {choice}: {done}/{len(items)}, {valid_calls} valid, {right_args} exact arguments, "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        function = question["function"][0]
        schema = json_schema(function["parameters"])
        tools = [{"type": "function", "function": {**function, "parameters": schema}}]
        reply = sdk.chat.completions.create(
            model=model, messages=question["question"][0], tools=tools, tool_choice=choice,
            temperature=0, max_tokens=max_tokens,
        )
        calls = reply.choices[0].message.tool_calls or []
        if not calls or calls[0].function.name != function["name"]:
            continue
        try:
            arguments = json.loads(calls[0].function.arguments)
        except json.JSONDecodeError:
            continue
        if isinstance(arguments, dict) and valid(arguments, schema):
            valid_calls += 1
            right_args += matches_answer(arguments, answer["ground_truth"][0][function["name"]])
    count = len(items)
    return {
        "valid_call_rate": round(valid_calls / count, 3),
        "exact_args_rate": round(right_args / count, 3),
        "mean_latency_s": round((time.perf_counter() - started) / count, 2),
    }


def speed(sdk: openai.OpenAI, model: str, decode_tokens: int) -> dict[str, Any]:
    stream = sdk.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=decode_tokens,
        temperature=0, stream=True, extra_body={"ignore_eos": True},
    )
    stamps = [time.perf_counter() for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
    decode = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    long_text = " ".join(f"item {i} is {i * 7 % 13}." for i in range(180))
    started = time.perf_counter()
    reply = sdk.chat.completions.create(
        model=model, messages=[{"role": "user", "content": f"{uuid.uuid4()} {long_text}"}], max_tokens=1, temperature=0
    )
    prefill = reply.usage.prompt_tokens / (time.perf_counter() - started)
    return {"decode_tok_s": round(decode, 2), "prefill_tok_s": round(prefill, 1)}


def prefix_cache(sdk: openai.OpenAI, model: str) -> dict[str, Any]:
    context = " ".join(f"Record {i}: the value of key {i} is {i * 31 % 97}." for i in range(140))

    def timed(salt: str, question: str) -> tuple[float, Any]:
        started = time.perf_counter()
        messages = [{"role": "system", "content": f"{salt} {context}"}, {"role": "user", "content": question}]
        reply = sdk.chat.completions.create(model=model, messages=messages, max_tokens=4, temperature=0)
        return time.perf_counter() - started, reply.usage

    salt = str(uuid.uuid4())
    uncached, usage = timed(salt, "What is the value of key 17?")
    cached, cached_usage = timed(salt, "What is the value of key 18?")
    return {
        "prompt_tokens": usage.prompt_tokens,
        "cached_tokens": cached_usage.prompt_tokens_details.cached_tokens,
        "uncached_s": round(uncached, 3),
        "cached_s": round(cached, 3),
        "cached_over_uncached": round(cached / uncached, 3),
    }


def run_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    pull(name)
    started = time.perf_counter()
    engines = load_engines([name], decoder=args.decoder)
    result: dict[str, Any] = {"load_s": round(time.perf_counter() - started, 1)}
    with ServerThread(engines) as server, openai.OpenAI(base_url=server.base_url, api_key="x", timeout=3600) as sdk:
        result |= speed(sdk, name, args.decode_tokens)
        result["prefix_cache"] = prefix_cache(sdk, name)
        if args.bfcl_dir and not name.startswith("smollm2"):
            items = load_bfcl(Path(args.bfcl_dir), args.limit)
            result["bfcl_simple_python"] = {
                "n": len(items),
                "free": bfcl_rate(sdk, name, items, "auto", args.max_tokens),
                "constrained": bfcl_rate(sdk, name, items, "required", args.max_tokens),
            }
    result["decoder"] = args.decoder
    print(f"{name}: {json.dumps(result)}", file=sys.stderr, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smollm2-135m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    parser.add_argument("--bfcl-dir", default="../shared/data/bfcl", help="empty to skip BFCL")
    parser.add_argument("--limit", type=int, default=100, help="first N BFCL simple_python questions")
    parser.add_argument("--max-tokens", type=int, default=128, help="completion cap for BFCL answers")
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--decoder", default="greedy", choices=["greedy", "toolspec"],
                        help="toolspec: the same greedy answers (tests/test_decoding*.py), in fewer forwards; "
                             "decode/prefill speeds are then the ToolSpec decoder's")
    args = parser.parse_args()
    results = {name: run_model(name, args) for name in args.models.split(",") if name}
    print(json.dumps({"models": results, "bfcl_limit": args.limit}))


if __name__ == "__main__":
    main()
