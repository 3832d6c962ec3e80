"""A right guess given as a hint from the first forward costs two target forwards; a wrong one stays cheap.

Issue 27: the pruner used to judge a hint token by token (0.9 per token after the first), so a right 30-token
call was cut after about ten tokens and took four forwards.  A hint that has matched the output from its start is
now one bet (:class:`~agentspec.decoding.drafter.Unit`): drafted whole, given the tree budget first, kept whole
while its source's guesses are mostly right.  Output is greedy's, token for token, in every case.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from decoding_support import SMOL, chat_prompt, local, plain_greedy, weather_grammar
from local_models import WEATHER_TOOLS

from agentspec.decoding.budget import DEFAULT_COST, AcceptanceModel, prune
from agentspec.decoding.decoder import DecodeResult, ToolSpecDecoder, default_drafters
from agentspec.decoding.drafter import Unit
from agentspec.engine.token_tree import TokenTree

FUNCTIONS = [tool["function"] for tool in WEATHER_TOOLS]
QUESTION = "What is the weather in Paris, in celsius?"


@pytest.fixture(scope="module")
def smol() -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # a 135M model: one thread is about as fast, and far faster on a busy machine
    yield local(SMOL)
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def call(smol: Any) -> dict[str, Any]:
    """The question's prompt, grammar, plain greedy answer and the hint-free ToolSpec run."""
    grammar = weather_grammar(smol, WEATHER_TOOLS)
    prompt = chat_prompt(smol, QUESTION)
    return {"prompt": prompt, "grammar": grammar, "answer": plain_greedy(smol, prompt, 60, grammar),
            "none": _decode(smol, prompt, grammar, [])}


def _decode(lm: Any, prompt: list[int], grammar: str, hints: list[str]) -> DecodeResult:
    decoder = ToolSpecDecoder(lm, default_drafters())  # fresh: priors only, no history of earlier calls
    return decoder.generate(prompt, max_tokens=60, grammar=grammar, tools=FUNCTIONS, hints=hints)


def test_a_right_hint_from_the_first_forward_costs_two_forwards(smol: Any, call: dict[str, Any]) -> None:
    none = call["none"]
    assert none.tokens == call["answer"] and len(none.tokens) >= 30
    assert '"city": "Paris"' in none.text
    right = _decode(smol, call["prompt"], call["grammar"], [none.text])
    assert right.tokens == call["answer"]
    # The prompt's forward gives the first token; one tree verifies the whole rest of the guess.
    assert right.stats.forwards <= 2 < none.stats.forwards


@pytest.mark.parametrize("wrong", ['"city": "Rome"', '"unit": "fahrenheit"', '"name": "get_time"'])
def test_a_hint_wrong_in_one_place_changes_nothing_and_costs_no_extra_forward(
    smol: Any, call: dict[str, Any], wrong: str,
) -> None:
    none = call["none"]
    right = {'"city": "Rome"': '"city": "Paris"', '"unit": "fahrenheit"': '"unit": "celsius"',
             '"name": "get_time"': '"name": "get_weather"'}[wrong]
    hint = none.text.replace(right, wrong)
    assert hint != none.text
    result = _decode(smol, call["prompt"], call["grammar"], [hint])
    assert result.tokens == call["answer"]
    # Measured (experiments/hint_forwards.md): a wrong hint never took more forwards than no hint; its whole
    # chain rides in one tree while it matches, then only its realigned pieces: bounded extra nodes.
    assert result.stats.forwards <= none.stats.forwards
    assert result.stats.tree_nodes <= none.stats.tree_nodes + 64


def test_the_pruner_keeps_a_unit_whole_until_its_source_is_learnt_to_miss() -> None:
    tree = TokenTree(root=0)
    tree.add_path(range(1, 31), "hint.speculator")  # the first token's source for all: 0.5 each, a flat chain
    unit = Unit("hint.speculator.whole", tuple(range(1, 31)))
    model = AcceptanceModel()
    assert prune(tree, model, DEFAULT_COST).drafts <= 3
    assert prune(tree, model, DEFAULT_COST, [unit]).drafts == 30
    for _ in range(12):  # right 3 in 16 with the prior: 30 tokens at 0.19 each still pay for the bigger forward
        model.observe("hint.speculator.whole", False)
    assert prune(tree, model, DEFAULT_COST, [unit]).drafts == 30
    for _ in range(30):  # a speculator whose guesses keep missing is cut back to what its tokens are worth
        model.observe("hint.speculator.whole", False)
    assert prune(tree, model, DEFAULT_COST, [unit]).drafts <= 4


def test_every_verified_unit_teaches_its_source(smol: Any, call: dict[str, Any]) -> None:
    decoder = ToolSpecDecoder(smol, default_drafters())
    wrong = call["none"].text.replace('"city": "Paris"', '"city": "Rome"')
    decoder.generate(call["prompt"], max_tokens=60, grammar=call["grammar"], tools=FUNCTIONS, hints=[wrong])
    assert decoder.acceptance.tested["hint.client.whole"] >= 1
    assert decoder.acceptance.accepted["hint.client.whole"] == 0
    decoder.generate(call["prompt"], max_tokens=60, grammar=call["grammar"], tools=FUNCTIONS,
                     hints=[call["none"].text])
    assert decoder.acceptance.accepted["hint.client.whole"] == 1
