"""Concurrent requests on one engine are decoded together, and each gets exactly the tokens it gets alone."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentspec.engine.generation import SamplingParams
from agentspec.engine.scheduler import Engine, PrefixCache

pytest.importorskip("torch")
pytest.importorskip("transformers")

PROMPTS = ("def add(a, b):", "The three primary colours are", "import json\nwith open('x.json') as f:",
           "Once upon a time, a small robot")


def _model(name: str) -> Any:
    from agentspec.engine.model import load_model
    from agentspec.errors import ConfigError
    from agentspec.models.registry import resolve

    try:
        return load_model(resolve(name))
    except ConfigError as exc:
        pytest.skip(f"{name} is not available here: {exc}")


async def _generate(engine: Engine, prompt: list[int], params: SamplingParams, stop_after: int = 0) -> list[int]:
    tokens: list[int] = []
    async for step, _finish in engine.generate(prompt, params):
        tokens.extend(t.id for t in step)
        if stop_after and len(tokens) >= stop_after:
            break
    return tokens


def _together(engine: Engine, prompts: list[list[int]], params: SamplingParams,
              stop_after: dict[int, int] | None = None) -> list[list[int]]:
    results: list[list[int]] = [[] for _ in prompts]

    async def one(i: int) -> None:
        results[i] = await _generate(engine, prompts[i], params, (stop_after or {}).get(i, 0))

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for i in range(len(prompts)):
                group.start_soon(one, i)

    anyio.run(main)
    return results


def _alone(engine: Engine, prompt: list[int], params: SamplingParams) -> list[int]:
    return anyio.run(_generate, engine, prompt, params)


def _fresh(lm: Any, **options: Any) -> Engine:
    # No prefix reuse, so each request computes its prompt the same way alone and together.
    return Engine(lm, prefix_cache=PrefixCache(max_entries=0), **options)


def test_concurrent_greedy_requests_share_forwards_and_match_decoding_alone() -> None:
    lm = _model("smollm2-135m")
    prompts = [lm.encode(text) for text in PROMPTS]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    engine = _fresh(lm)
    alone = [_alone(engine, p, params) for p in prompts]
    forwards_alone = engine.stats.forwards
    together = _together(engine, prompts, params)
    assert together == alone
    assert all(len(tokens) == 12 for tokens in together)
    # Four requests of 13 forwards each (prefill + 12 tokens) took far fewer forwards together.
    assert forwards_alone >= 4 * 12
    assert engine.stats.forwards - forwards_alone <= 20
    assert engine.stats.batched_rows > 0
    assert engine.stats.active == 0


def test_a_long_prefill_is_chunked_between_decoding_steps_without_changing_any_output() -> None:
    lm = _model("smollm2-135m")
    long = lm.encode(" ".join(f"item {i} costs {i * 3} coins;" for i in range(40)) + " The total is")
    prompts = [lm.encode(PROMPTS[0]), lm.encode(PROMPTS[1]), long]
    params = SamplingParams(max_tokens=10, ignore_eos=True)
    engine = _fresh(lm, prefill_chunk=32)
    alone = [_alone(engine, p, params) for p in prompts]
    steps_before = engine.stats.steps
    together = _together(engine, prompts, params)
    assert together == alone
    chunks = -(-(len(long) - 0) // 32)
    assert chunks >= 5
    # Decoding steps ran beside the long prompt's chunks: fewer steps than chunks plus every decode in turn.
    assert engine.stats.steps - steps_before < chunks + 3 * 10


def test_a_request_that_stops_early_leaves_the_others_unchanged() -> None:
    lm = _model("smollm2-135m")
    prompts = [lm.encode(text) for text in PROMPTS[:3]]
    params = SamplingParams(max_tokens=10, ignore_eos=True)
    engine = _fresh(lm)
    alone = [_alone(engine, p, params) for p in prompts]
    together = _together(engine, prompts, params, stop_after={1: 3})
    assert together[0] == alone[0] and together[2] == alone[2]
    assert together[1] == alone[1][:3]
    assert engine.stats.active == 0


def test_sampled_and_greedy_requests_run_together() -> None:
    lm = _model("smollm2-135m")
    prompts = [lm.encode(text) for text in PROMPTS[:2]]
    greedy = SamplingParams(max_tokens=8, ignore_eos=True)
    sampled = SamplingParams(max_tokens=8, temperature=0.8, seed=7, ignore_eos=True)
    engine = _fresh(lm)
    alone = [_alone(engine, prompts[0], greedy), _alone(engine, prompts[1], sampled)]

    results: list[list[int]] = [[], []]

    async def main() -> None:
        async def one(i: int, params: SamplingParams) -> None:
            results[i] = await _generate(engine, prompts[i], params)

        async with anyio.create_task_group() as group:
            group.start_soon(one, 0, greedy)
            group.start_soon(one, 1, sampled)

    anyio.run(main)
    assert results == alone


@pytest.mark.slow
def test_qwen_half_billion_concurrent_greedy_matches_alone() -> None:
    lm = _model("qwen2.5-coder-0.5b")
    prompts = [lm.encode(text) for text in PROMPTS]
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    engine = _fresh(lm)
    alone = [_alone(engine, p, params) for p in prompts]
    assert _together(engine, prompts, params) == alone


def test_two_models_step_at_the_same_time_and_each_matches_its_decoding_alone() -> None:
    from agentspec.engine.model import load_model
    from agentspec.models.registry import resolve

    packed = _model("smollm2-135m")
    stock = load_model(resolve("smollm2-135m"), linear="stock")  # a second model object, as a second --model is
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    engines = [_fresh(packed), _fresh(stock)]
    prompts = [packed.encode(PROMPTS[0]), packed.encode(PROMPTS[1])]
    alone = [_alone(engine, prompt, params) for engine, prompt in zip(engines, prompts, strict=True)]
    results: list[list[int]] = [[], []]

    async def main() -> None:
        async def one(i: int) -> None:
            results[i] = await _generate(engines[i], prompts[i], params)

        async with anyio.create_task_group() as group:
            group.start_soon(one, 0)
            group.start_soon(one, 1)

    anyio.run(main)
    assert results == alone
    # Not behind one lock: the two engines' steps ran at the same time.
    assert engines[0].stats.overlapped_steps > 0 and engines[1].stats.overlapped_steps > 0


def test_a_toolspec_generation_shares_steps_with_plain_requests() -> None:
    from agentspec.decoding.serving import toolspec_decoder

    lm = _model("smollm2-135m")
    decoder = toolspec_decoder(lm)
    engine = _fresh(lm, decoder=decoder)
    prompts = [lm.encode(text) for text in PROMPTS[:3]]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    messages = [{"role": "user", "content": PROMPTS[0]}]

    async def tree(prompt: list[int]) -> list[int]:
        # A greedy request with a context runs on the ToolSpec decoder (tree forwards); the others run plain.
        context = decoder.context([], messages, [])
        tokens: list[int] = []
        async for step, _finish in engine.generate(prompt, params, context=context):
            tokens.extend(t.id for t in step)
        return tokens

    alone = [anyio.run(tree, prompts[0]), *(_alone(engine, p, params) for p in prompts[1:])]
    results: list[list[int]] = [[], [], []]

    async def main() -> None:
        async def one(i: int) -> None:
            results[i] = await (tree(prompts[i]) if i == 0 else _generate(engine, prompts[i], params))

        async with anyio.create_task_group() as group:
            for i in range(3):
                group.start_soon(one, i)

    rows_before = engine.stats.batched_rows
    anyio.run(main)
    assert results == alone
    assert engine.stats.batched_rows > rows_before
