"""oneDNN-packed linear layers: same numbers as stock layers (to rounding), greedy identity kept, clear errors."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from decoding_support import SMOL, OracleDrafter, local, plain_greedy, tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentspec.decoding.decoder import ToolSpecDecoder
from agentspec.engine.model import LocalModel, load_model
from agentspec.engine.packed_linear import can_pack, pack_linears
from agentspec.errors import ConfigError
from agentspec.models.registry import resolve

pytestmark = pytest.mark.skipif(not can_pack(), reason="this torch build has no oneDNN CPU kernels")


@pytest.fixture(scope="module")
def smol() -> Any:
    return local(SMOL)


@pytest.fixture(scope="module")
def packed_tiny(smol: Any) -> LocalModel:
    tiny = tiny_model(smol, seed=3)
    pack_linears(tiny.model)
    return tiny


def test_packed_layers_compute_what_stock_layers_compute(smol: Any) -> None:
    stock = tiny_model(smol, seed=1)
    packed = copy.deepcopy(stock.model)
    linears = sum(type(m) is torch.nn.Linear for m in packed.modules())
    assert pack_linears(packed) == linears > 0
    assert not any(type(m) is torch.nn.Linear for m in packed.modules())
    # No unpacked copy stays behind: packing costs no memory.
    assert all(getattr(m, "weight", None) is None for m in packed.modules() if hasattr(m, "packed"))
    tokens = torch.tensor([list(range(100, 133))])
    with torch.inference_mode():
        expected = stock.model(input_ids=tokens).logits
        got = packed(input_ids=tokens).logits
    assert torch.allclose(got, expected, atol=1e-4, rtol=1e-4)
    assert not torch.equal(got, torch.zeros_like(got))


def test_a_tied_output_embedding_keeps_sharing_the_input_embedding(smol: Any) -> None:
    model = copy.deepcopy(tiny_model(smol, seed=2).model)
    model.lm_head.weight = model.get_input_embeddings().weight
    pack_linears(model)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), length=st.integers(2, 30), noise=st.integers(0, 8), budget=st.integers(1, 64))
def test_tree_decoding_on_packed_layers_equals_plain_greedy(packed_tiny: LocalModel, seed: int, length: int,
                                                            noise: int, budget: int) -> None:
    prompt = [100 + (seed * 11 + 17 * i) % 5000 for i in range(length)]
    answer = plain_greedy(packed_tiny, prompt, 20)
    decoder = ToolSpecDecoder(packed_tiny, [OracleDrafter(answer, packed_tiny.vocab_size, seed, noise)],
                              budget=budget, cost=None)
    result = decoder.generate(prompt, max_tokens=20)
    assert result.tokens == answer
    assert result.stats.forwards <= len(answer)


def test_registry_models_load_packed_by_default_and_stock_on_request(smol: Any, monkeypatch: Any) -> None:
    assert smol.linear == "packed"
    monkeypatch.setenv("AGENTSPEC_LINEAR", "stock")
    stock = load_model(resolve(SMOL))
    assert stock.linear == "stock" and stock is not smol
    assert any(type(m) is torch.nn.Linear for m in stock.model.modules())
    prompt = list(range(300, 340))
    assert plain_greedy(stock, prompt, 12) == plain_greedy(smol, prompt, 12)


def test_an_unknown_linear_kind_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="unknown linear kind 'fast'.*packed, stock"):
        load_model(resolve(SMOL), linear="fast")
