"""ToolSpec decoder: token tree, verifier (identity with plain greedy), drafters, hints, near ties, stats."""

from __future__ import annotations

import doctest
import threading
import time
from typing import Any

import pytest
import torch
from decoding_support import SMOL, OracleDrafter, chat_prompt, local, plain_greedy, tiny_model, weather_grammar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from local_models import WEATHER_TOOLS

import agentspec.decoding as decoding
from agentspec.decoding import (
    budget,
    drafter,
    json_prefix,
    recycling_drafter,
    retrieval_drafter,
    schema_drafter,
    sidecar,
    stats,
    suffix_index,
)
from agentspec.decoding.budget import DEFAULT_COST, AcceptanceModel, ForwardCost, prune
from agentspec.decoding.decoder import ToolSpecDecoder, default_drafters
from agentspec.decoding.drafter import DraftRequest, DraftState, HintBox
from agentspec.decoding.hint_drafter import HintDrafter
from agentspec.decoding.recycling_drafter import RecyclingDrafter, prompt_lookup
from agentspec.decoding.retrieval_drafter import CallHistory, RetrievalDrafter
from agentspec.decoding.schema_drafter import SchemaDrafter
from agentspec.decoding.stats import DraftStats
from agentspec.decoding.suffix_index import SuffixAutomaton
from agentspec.decoding.verifier import Verifier
from agentspec.engine import grammar, token_tree
from agentspec.engine.generation import SamplingParams, TokenOut, TokenStream, drain
from agentspec.engine.grammar import GrammarConstraint
from agentspec.engine.greedy import GreedyChooser
from agentspec.engine.kv_cache import TargetSequence
from agentspec.engine.plain import PlainGenerator
from agentspec.engine.token_tree import TokenTree

FUNCTIONS = [tool["function"] for tool in WEATHER_TOOLS]
PROMPTS = ["Name three fruits.", "Write a haiku about rain.", "Say hello in French."]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Any:
    # These models are tiny: one intra-op thread is about as fast, and far faster on a busy machine.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def smol() -> Any:
    return local(SMOL)


@pytest.fixture(scope="module")
def tiny(smol: Any) -> Any:
    return tiny_model(smol)


def test_module_examples_run() -> None:
    for module in (token_tree, stats, drafter, json_prefix, suffix_index, schema_drafter, retrieval_drafter,
                   recycling_drafter, sidecar, budget, grammar):
        assert doctest.testmod(module).failed == 0, module.__name__
    assert decoding.__all__ == sorted(decoding.__all__)
    assert all(hasattr(decoding, name) for name in decoding.__all__)


# ---------------------------------------------------------------- token tree


def test_mask_and_positions_of_a_hand_built_tree() -> None:
    tree = TokenTree(root=10, budget=8)
    assert tree.add_path([11, 12], "a") == 2      # root -> 11 -> 12
    assert tree.add_path([11, 13], "b") == 1      # shares 11
    assert tree.add_path([14], "c") == 1          # root -> 14
    assert tree.tokens == [10, 11, 12, 13, 14] and tree.parents == [-1, 0, 1, 1, 0]
    assert tree.sources == ["root", "a", "a", "b", "c"]
    mask = tree.attention_mask(prefix_len=3)
    assert mask.shape == (1, 1, 5, 8) and mask.dtype == torch.float32
    visible = (mask[0, 0] == 0).int().tolist()
    minimum = torch.finfo(torch.float32).min
    assert set(mask.unique().tolist()) == {0.0, minimum}
    assert visible == [
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 0, 1, 0],
        [1, 1, 1, 1, 0, 0, 0, 1],
    ]
    assert tree.position_ids(3).tolist() == [[3, 4, 5, 5, 4]]
    rows = tree.attention_mask(3, rows=slice(2, 4))
    assert rows.shape == (1, 1, 2, 7)
    assert (rows[0, 0] == 0).int().tolist() == [[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0, 1]]
    assert tree.position_ids(3, rows=slice(2, 4)).tolist() == [[5, 5]]
    assert tree.first_chain(0) == [0, 1, 2] and tree.leaves() == [2, 3, 4]


def test_budget_caps_draft_nodes_and_merge_keeps_sources() -> None:
    tree = TokenTree(root=1, budget=3)
    assert tree.add_path([2, 3, 4, 5], "x") == 3 and tree.drafts == 3 and tree.room == 0
    assert tree.add(0, 9, "y") is None
    other = TokenTree(root=1, budget=8)
    other.add_path([2, 7], "z")
    big = TokenTree(root=1, budget=8)
    big.merge(tree)
    big.merge(other)
    assert big.path_tokens(len(big) - 1) == [2, 7] and big.sources[-1] == "z" and big.sources[1] == "x"


def test_prune_keeps_sure_chains_and_drops_unlikely_nodes() -> None:
    tree = TokenTree(root=0, budget=80)
    tree.add_path(range(1, 11), "schema")
    for start in range(100, 160, 3):
        tree.add_path([start, start + 1, start + 2], "recycling")
    pruned = prune(tree, AcceptanceModel(), DEFAULT_COST)
    assert pruned.sources.count("schema") == 10 and pruned.sources.count("recycling") < 5
    assert prune(tree, AcceptanceModel(), ForwardCost((1, 100), (1.0, 1.0))).drafts == tree.drafts
    # Where a second row costs (stock CPU layers: 1.6x), one plain forward beats a tree of unlikely drafts;
    # where it is free (packed layers: 2-4 rows cost one), even an unlikely draft rides along.
    unlikely = TokenTree(root=0, budget=8)
    unlikely.add_path([5, 6], "recycling")
    assert prune(unlikely, AcceptanceModel(), ForwardCost((1, 2, 8), (1.0, 1.6, 2.2))).drafts == 0
    assert prune(unlikely, AcceptanceModel(), ForwardCost((1, 4, 8), (1.0, 1.0, 1.3))).drafts == 2


def test_a_hint_whose_first_token_is_right_is_kept_far_beyond_it() -> None:
    """A predicted call is drafted as its first token (``hint.speculator``) and the rest (``.rest``): once the
    first is accepted the rest almost always is, and the pruner keeps it rather than cutting it after a few nodes."""
    from agentspec.decoding.drafter import DraftRequest, DraftState, HintBox
    from agentspec.decoding.hint_drafter import HintDrafter

    class Chars:  # a model whose tokens are single characters: all the drafter needs
        def token_bytes(self, token: int) -> bytes:
            return bytes([token])

    class CharState(DraftState):
        def continuations(self, text: str, tail: int = 4) -> list[list[int]]:
            return [[ord(c) for c in text]]

    box = HintBox()
    box.put("abcdefghijklmnopqrstuvwxyz0123", "hint.speculator")
    state = CharState(DraftRequest(Chars(), (1,), hints=box), [ord("a")])  # type: ignore[arg-type]
    tree = HintDrafter().propose(state, 64)
    assert tree.sources[1] == "hint.speculator" and set(tree.sources[2:]) == {"hint.speculator.rest"}
    kept = prune(tree, AcceptanceModel(), DEFAULT_COST)
    assert kept.drafts >= 12  # 13 on the priors alone; learnt acceptance keeps more
    flat = TokenTree(root=0, budget=64)
    flat.add_path(range(1, 30), "hint.speculator")
    assert prune(flat, AcceptanceModel(), DEFAULT_COST).drafts <= 3


# ---------------------------------------------------------------- verifier


def test_cache_after_partial_acceptance_equals_a_plain_forward(tiny: Any) -> None:
    prompt = list(range(100, 140))
    answer = plain_greedy(tiny, prompt, 8)
    seq = TargetSequence(tiny)
    first = int(torch.argmax(seq.prefill(prompt)))
    assert first == answer[0]
    tree = TokenTree(root=first, budget=16)
    tree.add_path([7, 8, 9], "noise")                       # rejected branch first in node order
    tree.add_path(answer[1:4] + [5, 6], "oracle")           # three right, then wrong
    chooser = GreedyChooser(frozenset(), vocab_size=tiny.vocab_size)
    verdict = Verifier().verify(seq, tree, chooser, position=1, max_new=20)
    assert verdict.tokens == answer[1:5] and verdict.sources == ["oracle"] * 3 + ["bonus"]
    assert seq.length == len(prompt) + 4                     # prompt + root + 3 accepted drafts
    reference = torch.nn.Module()
    import transformers

    cache = transformers.DynamicCache(config=tiny.model.config)
    with torch.inference_mode():
        tiny.model(input_ids=torch.tensor([prompt + answer[:4]]), cache=cache, use_cache=True)
    for mine, theirs in zip(seq.cache.layers, cache.layers):
        assert torch.allclose(mine.keys, theirs.keys, atol=1e-4)
        assert torch.allclose(mine.values, theirs.values, atol=1e-4)
    del reference


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), length=st.integers(2, 40), noise=st.integers(0, 8), budget=st.integers(1, 80))
def test_random_trees_never_change_greedy_output(tiny: Any, seed: int, length: int, noise: int, budget: int) -> None:
    prompt = [100 + (seed * 7 + 13 * i) % 5000 for i in range(length)]
    answer = plain_greedy(tiny, prompt, 24)
    decoder = ToolSpecDecoder(tiny, [OracleDrafter(answer, tiny.vocab_size, seed, noise)], budget=budget,
                              cost=None)
    result = decoder.generate(prompt, max_tokens=24)
    assert result.tokens == answer
    assert result.stats.forwards <= len(answer) and result.finish == "length"


def test_tree_decoder_matches_plain_greedy_on_smollm(smol: Any) -> None:
    decoder = ToolSpecDecoder(smol, default_drafters(CallHistory()))
    for index, text in enumerate(PROMPTS):
        prompt = chat_prompt(smol, text)
        answer = plain_greedy(smol, prompt, 24)
        assert decoder.generate(prompt, max_tokens=24).tokens == answer, text
        if index == 0:
            oracle = ToolSpecDecoder(smol, [OracleDrafter(answer, smol.vocab_size)], cost=None)
            result = oracle.generate(prompt, max_tokens=24)
            assert result.tokens == answer and result.stats.forwards < len(answer) / 2


def _run(stream: TokenStream) -> list[TokenOut]:
    return drain(stream)


@pytest.mark.parametrize("constrained", [False, True], ids=["free", "grammar"])
def test_the_servers_plain_path_and_the_tree_decoder_make_the_same_greedy_choices(
    smol: Any, tiny: Any, constrained: bool
) -> None:
    """One greedy chooser: the plain path (the server's default) and ToolSpec agree with independent greedy."""
    prompt = chat_prompt(tiny, "What is the weather in Paris, in celsius?")
    grammar = weather_grammar(smol, WEATHER_TOOLS) if constrained else None
    answer = plain_greedy(tiny, prompt, 24, grammar)
    constraint = GrammarConstraint(grammar, tiny.ll_tokenizer, tiny.vocab_size) if grammar is not None else None
    stream = PlainGenerator().start(tiny, prompt, SamplingParams(max_tokens=24, top_logprobs=2), constraint=constraint)
    plain = _run(stream)
    assert [token.id for token in plain] == answer
    tree = ToolSpecDecoder(tiny, [OracleDrafter(answer, tiny.vocab_size)], cost=None).generate(
        prompt, max_tokens=24, grammar=grammar, top_logprobs=2)
    assert tree.tokens == answer
    assert [t.logprob for t in plain] == pytest.approx([c.logprob for c in tree.choices], abs=1e-4)
    assert [t.top[0][0] for t in plain] == [c.top[0][0] for c in tree.choices]


def test_the_plain_path_reuses_a_cached_prefix(tiny: Any) -> None:
    """A stream started from another's key/values computes only the rest of the prompt, with the same answer."""
    prompt = list(range(100, 140))
    params = SamplingParams(max_tokens=8)
    first = PlainGenerator().start(tiny, prompt, params)
    answer = [token.id for token in _run(first)]
    reused = PlainGenerator().start(tiny, prompt, params, reuse=(30, first.layers()))
    assert reused.cached == 30 and reused.covered == prompt[:30]
    assert [token.id for token in _run(reused)] == answer and reused.seq.forwards == 1 + len(answer) - 1


def test_constrained_call_matches_plain_greedy_with_fewer_forwards(smol: Any) -> None:
    grammar = weather_grammar(smol, WEATHER_TOOLS)
    prompt = chat_prompt(smol, "What is the weather in Paris, in celsius?")
    answer = plain_greedy(smol, prompt, 60, grammar)
    result = ToolSpecDecoder(smol, default_drafters()).generate(prompt, max_tokens=60, grammar=grammar,
                                                               tools=FUNCTIONS)
    assert result.tokens == answer and result.finish == "stop"
    assert result.text.startswith('<tool_call>\n{"name": "get_')
    report = result.stats.as_dict()
    assert report["target_forwards"] * 3 <= len(answer)
    from_schema = sum(n for source, n in report["accepted_by_source"].items() if source.startswith("schema"))
    assert from_schema > len(answer) / 2


class _BrokenDrafter:
    name = "broken"

    def propose(self, state: DraftState, budget: int) -> TokenTree:
        raise RuntimeError("index out of date")


class _OutOfVocabularyDrafter:
    name = "oov"

    def propose(self, state: DraftState, budget: int) -> TokenTree:
        tree = TokenTree(root=state.output[-1], budget=budget)
        tree.add_path([state.lm.vocab_size + 5, 3], "oov")
        return tree


def test_failing_or_out_of_vocabulary_drafters_never_change_the_output(tiny: Any, caplog: Any) -> None:
    prompt = list(range(50, 80))
    answer = plain_greedy(tiny, prompt, 16)
    drafters = [_BrokenDrafter(), _OutOfVocabularyDrafter(), OracleDrafter(answer, tiny.vocab_size, noise=0)]
    with caplog.at_level("WARNING"):
        result = ToolSpecDecoder(tiny, drafters, cost=None).generate(prompt, max_tokens=16)
    assert result.tokens == answer
    assert result.stats.forwards < len(answer)  # the working drafter still drafts
    assert result.stats.as_dict()["drafter_errors"]["broken"] >= 1
    assert "drafter broken failed (RuntimeError: index out of date)" in caplog.text
    assert caplog.text.count("drafter broken failed") == 1  # once per request, then counted


def test_near_ties_are_counted_and_decided_in_plain_passes(tiny: Any) -> None:
    prompt = list(range(200, 230))
    answer = plain_greedy(tiny, prompt, 12)
    drafters = [OracleDrafter(answer, tiny.vocab_size, noise=0)]
    # A threshold so large that every choice is a "near tie": each is deferred to a plain one-token pass.
    rechecked = ToolSpecDecoder(tiny, drafters, near_tie=1e9, cost=None).generate(prompt, max_tokens=12)
    assert rechecked.tokens == answer
    ties = rechecked.stats.near_ties
    assert len(ties) == len(answer) and all(t["plain_pass"] for t in ties)
    assert [t["position"] for t in ties] == list(range(len(answer)))
    assert all(t["margin"] >= 0 and t["token"] == token for t, token in zip(ties, answer))
    assert rechecked.stats.rechecks > 0
    # Without rechecks, ties decided inside a tree pass are reported as such.
    inline = ToolSpecDecoder(tiny, drafters, near_tie=1e9, recheck=False, cost=None).generate(
        prompt, max_tokens=12)
    assert inline.tokens == answer and any(not t["plain_pass"] for t in inline.stats.near_ties)
    # The default threshold (1e-3) sees none here.
    assert ToolSpecDecoder(tiny, drafters).generate(prompt, max_tokens=12).stats.near_ties == []


def test_chooser_margin_is_against_the_best_legal_alternative() -> None:
    chooser = GreedyChooser(frozenset({3}), vocab_size=5)
    choice = chooser.choose(torch.tensor([0.0, 5.0, 4.9995, 1.0, 2.0]), near_tie=1e-3)
    assert choice.token == 1 and choice.runner_up == 2 and 0 < choice.margin < 1e-3
    eos = chooser.choose(torch.tensor([0.0, 1.0, 0.5, 9.0, 2.0]), near_tie=1e-3)
    assert eos.token == 3 and chooser.is_stop(eos.token)
    no_eos = GreedyChooser(frozenset({3}), vocab_size=5, ignore_eos=True)
    assert no_eos.choose(torch.tensor([0.0, 1.0, 0.5, 9.0, 2.0]), near_tie=1e-3).token == 4


# ---------------------------------------------------------------- drafters


def _state(lm: Any, text: str, *, grammar: str | None = None, tools: Any = (), prompt: str = "Q") -> DraftState:
    import llguidance

    output = lm.encode(text)
    matcher = None
    if grammar is not None:
        matcher = llguidance.LLMatcher(lm.ll_tokenizer, grammar)
        assert matcher.consume_tokens(output), matcher.get_error()
    request = DraftRequest(lm, tuple(lm.encode(prompt)), tuple(tools), grammar)
    return DraftState(request, output, matcher)


def _assert_every_branch_legal(state: DraftState, tree: TokenTree) -> None:
    for leaf in tree.leaves():
        path = tree.path_tokens(leaf)
        assert state.matcher.validate_tokens(path) == len(path)


def _texts(lm: Any, tree: TokenTree) -> list[str]:
    return [b"".join(lm.token_bytes(t) for t in tree.path_tokens(leaf)).decode() for leaf in tree.leaves()]


def test_schema_drafter_forces_the_structure_of_the_schema(smol: Any) -> None:
    grammar = weather_grammar(smol, WEATHER_TOOLS[:1])
    state = _state(smol, "<tool_call>", grammar=grammar, tools=FUNCTIONS[:1])
    tree = SchemaDrafter().propose(state, 64)
    first = b"".join(smol.token_bytes(t) for t in tree.path_tokens(tree.first_chain(0)[-1])).decode()
    assert first.startswith('\n{"name": "get_weather", "arguments": {"city": "')
    _assert_every_branch_legal(state, tree)


def test_schema_drafter_enumerates_names_and_enum_values(smol: Any) -> None:
    grammar = weather_grammar(smol, WEATHER_TOOLS)
    at_name = _state(smol, '<tool_call>\n{"name": "get_', grammar=grammar, tools=FUNCTIONS)
    names = _texts(smol, SchemaDrafter().propose(at_name, 64))
    assert any(t.startswith('weather", "arguments": {"city": "') for t in names)
    assert any(t.startswith('time", "arguments": {"zone": "') for t in names)
    at_unit = _state(smol, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"', grammar=grammar,
                     tools=FUNCTIONS)
    units = _texts(smol, SchemaDrafter().propose(at_unit, 64))
    assert any('"unit": "celsius"}}' in t for t in units) and any('"fahrenheit"}}' in t for t in units)
    at_bool = _state(smol, '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC", "hours_24": ',
                     grammar=grammar, tools=FUNCTIONS)
    bools = _texts(smol, SchemaDrafter().propose(at_bool, 64))
    assert any(t.startswith("true}}") for t in bools) and any(t.startswith("false}}") for t in bools)


def test_schema_drafter_drafts_the_choices_after_forced_text(smol: Any) -> None:
    grammar = weather_grammar(smol, WEATHER_TOOLS)
    # Both names start with "get_", which the grammar forces: each whole name still gets its branch.
    opening = _state(smol, "<tool_call>", grammar=grammar, tools=FUNCTIONS)
    texts = _texts(smol, SchemaDrafter().propose(opening, 64))
    assert any(t.startswith('\n{"name": "get_weather", "arguments": {"city": "') for t in texts)
    assert any(t.startswith('\n{"name": "get_time", "arguments": {"zone": "') for t in texts)
    # After a key the separator is forced; the value joins it in the canonical tokens (" true" is one token).
    at_key = _state(smol, '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC", "hours_24"',
                    grammar=grammar, tools=FUNCTIONS)
    tree = SchemaDrafter().propose(at_key, 64)
    assert any(t.startswith(": true}}") for t in _texts(smol, tree))
    assert any(t.startswith(": false}}") for t in _texts(smol, tree))
    _assert_every_branch_legal(at_key, tree)
    # Values copied from the question follow a forced separator too.
    copy = _state(smol, '<tool_call>\n{"name": "get_weather", "arguments": {"city"', grammar=grammar,
                  tools=FUNCTIONS, prompt="Weather in San Francisco, CA?")
    copy.request.question = "Weather in San Francisco, CA?"
    assert any(t.startswith(': "San Francisco, CA", "unit": ') for t in _texts(smol, SchemaDrafter().propose(copy, 64)))


def test_schema_drafter_follows_an_unconstrained_call(smol: Any) -> None:
    state = _state(smol, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"', tools=FUNCTIONS)
    texts = _texts(smol, SchemaDrafter().propose(state, 64))
    assert any(t.startswith(', "unit": "celsius"') for t in texts)
    opening = _state(smol, "<tool", tools=FUNCTIONS)
    assert any(t.startswith('_call>\n{"name": "') for t in _texts(smol, SchemaDrafter().propose(opening, 64)))


def test_retrieval_drafter_continues_a_known_suffix(smol: Any) -> None:
    history = CallHistory()
    assert history.add_output('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
                              '"unit": "celsius"}}\n</tool_call>') == 1
    state = _state(smol, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"', tools=FUNCTIONS)
    tree = RetrievalDrafter(history, use_prompt=False).propose(state, 64)
    assert any(t.startswith(', "unit": "celsius"}}') for t in _texts(smol, tree))
    assert set(tree.sources[1:]) == {"retrieval.history"}
    from_prompt = _state(smol, "The code is XJ-4", prompt="remember: the code is XJ-4417-QQ, repeat it")
    tree = RetrievalDrafter(None).propose(from_prompt, 64)
    assert any(t.startswith("417-QQ") for t in _texts(smol, tree))


def test_call_history_persists(tmp_path: Any) -> None:
    path = tmp_path / "calls.jsonl"
    CallHistory(path).add_output('{"name": "f", "arguments": {"x": 1}} and {"name": "g", "arguments": {}}')
    again = CallHistory(path)
    assert again.count == 2 and again.index("f") is not None and again.index("h") is None


def test_recycling_drafter_proposes_lookup_and_recycled_tokens(smol: Any) -> None:
    assert prompt_lookup([5, 6, 7, 8, 9, 5, 6], k=2) == [7, 8]
    state = _state(smol, "one two", prompt="one two three four")
    state.successors[state.output[-1]] = [11, 12, 13]
    state.successors[11] = [21]
    tree = RecyclingDrafter().propose(state, 64)
    assert "prompt_lookup.2" in tree.sources and "recycling" in tree.sources
    assert any(t.startswith(" three four") for t in _texts(smol, tree))
    assert tree.child(tree.child(0, 11), 21) is not None


def test_hint_drafter_aligns_by_prefix_then_by_suffix(smol: Any) -> None:
    hint = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "unit": "celsius"}}\n</tool_call>'
    state = _state(smol, '<tool_call>\n{"name": "get_we')
    state.request.hints.put(hint, "hint.test")
    assert any(t.startswith('ather", "arguments": {"city": "Rome"') for t in _texts(smol, HintDrafter().propose(state, 64)))
    moved = _state(smol, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "un')
    moved.request.hints.put(hint, "hint.test")
    assert any(t.startswith('it": "celsius"}}') for t in _texts(smol, HintDrafter().propose(moved, 64)))
    assert HintDrafter().propose(_state(smol, "x"), 64).drafts == 0


def test_late_and_wrong_hints_never_change_the_output(smol: Any) -> None:
    grammar = weather_grammar(smol, WEATHER_TOOLS)
    prompt = chat_prompt(smol, "What time is it in Tokyo?")
    answer = plain_greedy(smol, prompt, 60, grammar)
    decoder = ToolSpecDecoder(smol, default_drafters())
    wrong = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Nowhere", "unit": "fahrenheit"}}'
    generation = decoder.start(prompt, max_tokens=60, grammar=grammar, tools=FUNCTIONS, hints=[wrong])
    while not generation.prefilled:
        generation.prefill()
    tokens, finish, step = [], None, 0
    while finish is None:
        if step == 2:
            # A hint arriving mid-generation from another thread is taken at the next tree.
            threading.Thread(target=generation.hints.put, args=(wrong + "\n</tool_call>", "hint.late")).start()
        choices, finish = generation.decode()
        tokens += [c.token for c in choices]
        step += 1
    assert tokens == answer


class _StuckSidecar:
    """A sidecar whose prediction never arrives."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def start(self, request: DraftRequest, messages: Any = None) -> Any:
        self.started.set()
        box: HintBox = request.hints
        job = type("Job", (), {"seconds": 0.0, "cancel": lambda _self: self.release.set()})()
        threading.Thread(target=lambda: self.release.wait(30) and box.put("late", "hint.sidecar"),
                         daemon=True).start()
        return job


def test_hints_never_block_decoding(smol: Any) -> None:
    stuck = _StuckSidecar()
    decoder = ToolSpecDecoder(smol, default_drafters(), sidecar=stuck)
    prompt = chat_prompt(smol, "What is the weather in Paris, in celsius?")
    began = time.perf_counter()
    result = decoder.generate(prompt, max_tokens=40, grammar=weather_grammar(smol, WEATHER_TOOLS), tools=FUNCTIONS)
    assert stuck.started.is_set() and stuck.release.is_set()   # started with the request, cancelled at its end
    assert result.finish == "stop" and time.perf_counter() - began < 25


def test_sidecar_predicts_a_call_in_the_background(smol: Any) -> None:
    from agentspec.decoding.sidecar import Sidecar

    helper = Sidecar(smol, max_steps=12)
    request = DraftRequest(smol, (1,), tuple(FUNCTIONS[:1]))
    job = helper.start(request, messages=[{"role": "user", "content": "Weather in Paris, in celsius?"}])
    assert job.wait(60) and job.error is None
    assert job.prediction is not None and job.prediction["name"] == "get_weather"
    hints = request.hints.snapshot()
    assert hints and hints[0].text.startswith('<tool_call>\n{"name": "get_weather", "arguments": {')
    assert all(h.source == "hint.sidecar" for h in hints) and job.seconds > 0


def test_sidecar_drafts_slots_whose_schema_is_a_ref_to_defs(smol: Any) -> None:
    """Pydantic-generated tools put nested types in $defs; a slot compiled alone still resolves its $ref."""
    from agentspec.decoding.sidecar import Sidecar

    tool = {"name": "get_weather", "description": "Current weather of a city.", "parameters": {
        "$defs": {"Unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/Unit"}},
        "required": ["city", "unit"]}}
    helper = Sidecar(smol, max_steps=12)
    request = DraftRequest(smol, (1,), (tool,))
    job = helper.start(request, messages=[{"role": "user", "content": "Weather in Paris, in celsius?"}])
    assert job.wait(60) and job.error is None and job.prediction is not None
    assert job.prediction["arguments"].get("unit") in ("celsius", "fahrenheit")


# ---------------------------------------------------------------- stats and indexes


def test_stats_merge_and_report() -> None:
    one, two = DraftStats(requests=1), DraftStats(requests=1)
    one.forward(3, tree_nodes=10)
    one.observe("schema", drafted=10, accepted=2)
    one.observe("bonus", drafted=0, accepted=1)
    two.forward(1)
    two.observe("bonus", 0, 1)
    one.merge(two)
    report = one.as_dict()
    assert report["target_forwards"] == 2 and report["tokens"] == 4 and report["tokens_per_forward"] == 2.0
    assert report["accepted_by_source"] == {"schema": 2, "bonus": 2}
    assert report["acceptance_rate_by_source"] == {"schema": 0.2}


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(st.text("abc", min_size=1, max_size=12), min_size=1, max_size=4),
       query=st.text("abc", max_size=10))
def test_suffix_automaton_finds_the_longest_occurring_suffix(docs: list[str], query: str) -> None:
    index = SuffixAutomaton()
    for doc in docs:
        index.add(doc)
    matcher = index.matcher()
    matcher.feed(query)
    expected = max((n for n in range(len(query) + 1) if any(query[len(query) - n :] in d for d in docs)), default=0)
    assert matcher.length == expected
    for piece in index.continuations(matcher, max_chars=5, min_match=1, limit=3):
        # Each continuation follows the matched suffix or a shorter one (a suffix link) in some document.
        tails = [query[len(query) - n :] for n in range(1, matcher.length + 1)]
        assert any(tail + piece in doc for tail in tails for doc in docs)
