"""Grouped-query attention folded into query rows: the same attention as transformers' sdpa, no cache copy."""

from __future__ import annotations

import copy

import torch
import transformers
from decoding_support import SMOL, local, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from agentspec.engine.grouped_attention import IMPLEMENTATION, grouped_sdpa, use_grouped_attention
from agentspec.engine.token_tree import TokenTree


class _Module(torch.nn.Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


@settings(max_examples=30, deadline=None)
@given(groups=st.sampled_from([1, 2, 3, 6]), kv_heads=st.integers(1, 3), queries=st.integers(1, 9),
       cached=st.integers(0, 40), seed=st.integers(0, 1000))
def test_folded_attention_equals_repeated_key_values(groups: int, kv_heads: int, queries: int, cached: int,
                                                     seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    heads, dim, keys = kv_heads * groups, 16, cached + queries
    query = torch.randn(1, heads, queries, dim, generator=generator)
    key = torch.randn(1, kv_heads, keys, dim, generator=generator)
    value = torch.randn(1, kv_heads, keys, dim, generator=generator)
    # A tree mask: every query sees the cached prefix and a random subset of the queries before it, and itself.
    mask = torch.full((1, 1, queries, keys), float("-inf"))
    mask[..., :cached] = 0
    for row in range(queries):
        visible = torch.rand(row + 1, generator=generator) < 0.5
        visible[row] = True
        mask[0, 0, row, cached : cached + row + 1][visible] = 0
    if queries == 1 and seed % 2:
        mask = None  # a plain decoding step: one query, no mask
    module = _Module(groups)
    got, _ = grouped_sdpa(module, query, key, value, mask, scaling=dim**-0.5)
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=dim**-0.5)
    assert got.shape == expected.shape == (1, queries, heads, dim)
    assert torch.allclose(got, expected, atol=1e-5)


def test_a_model_switched_to_folded_attention_computes_the_same_tree_logits() -> None:
    smol = local(SMOL)
    assert smol.model.config._attn_implementation == IMPLEMENTATION
    stock = tiny_model(smol, seed=4)
    folded = copy.deepcopy(stock.model)
    use_grouped_attention(folded)
    prompt = list(range(100, 130))
    tree = TokenTree(root=7, budget=16)
    tree.add_path([8, 9, 10], "a")
    tree.add_path([11, 12], "b")
    outputs = []
    for model in (stock.model, folded):
        cache = transformers.DynamicCache(config=model.config)
        with torch.inference_mode():
            model(input_ids=torch.tensor([prompt]), cache=cache, use_cache=True)
            out = model(input_ids=torch.tensor([tree.tokens]), attention_mask=tree.attention_mask(len(prompt),
                        torch.float32), position_ids=tree.position_ids(len(prompt)), cache=cache, use_cache=True)
        outputs.append(out.logits)
    assert stock.model.config._attn_implementation == "sdpa"
    assert torch.allclose(outputs[0], outputs[1], atol=1e-4)

