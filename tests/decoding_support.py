"""Helpers for the ToolSpec decoder tests: a plain greedy reference loop, a tiny random model, test drafters."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import transformers

from agentspec.decoding.drafter import DraftState
from agentspec.engine.grammar import ToolDef, tool_grammar
from agentspec.engine.model import LocalModel, load_model
from agentspec.engine.token_tree import TokenTree
from agentspec.models.registry import pull, resolve

SMOL = "smollm2-135m"
QWEN = "qwen2.5-coder-0.5b"


def local(name: str) -> LocalModel:
    """Registry model ``name``, pulled if needed, loaded once per process."""
    pull(name)
    return load_model(resolve(name))


def tiny_model(base: LocalModel, seed: int = 0) -> LocalModel:
    """A 2-layer random-weight Llama over ``base``'s tokenizer (fast; its greedy text is noise, which is fine)."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=base.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
    )
    config._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(config).eval()
    return LocalModel(id=f"tiny-{seed}", model=model, tokenizer=base.tokenizer, context_length=1024,
                      stop_token_ids=frozenset())


def plain_greedy(lm: LocalModel, prompt: Sequence[int], max_tokens: int, grammar: str | None = None) -> list[int]:
    """Plain greedy decoding, written independently of agentspec.decoding: one forward per token."""
    import llguidance

    matcher = llguidance.LLMatcher(lm.ll_tokenizer, grammar) if grammar is not None else None
    cache = transformers.DynamicCache(config=lm.model.config)
    tokens: list[int] = []
    with torch.inference_mode():
        out = lm.model(input_ids=torch.tensor([list(prompt)]), cache=cache, use_cache=True, logits_to_keep=1)
        while len(tokens) < max_tokens:
            logits = out.logits[0, -1].float().clone()
            if matcher is not None:
                bits = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
                allowed = np.unpackbits(bits, bitorder="little")[: logits.shape[-1]].astype(bool)
                logits[torch.from_numpy(~allowed)] = float("-inf")
            token = int(torch.argmax(logits))
            if token in lm.stop_token_ids:
                break
            tokens.append(token)
            if matcher is not None:
                assert matcher.consume_tokens([token])
                if matcher.is_stopped():
                    break
            out = lm.model(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True)
    return tokens


def chat_prompt(lm: LocalModel, text: str) -> list[int]:
    rendered = lm.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                tokenize=False)
    return lm.encode(rendered)


def weather_grammar(lm: LocalModel, tools: list[dict[str, Any]]) -> str:
    return tool_grammar([ToolDef.model_validate(tool) for tool in tools], ll_tokenizer=lm.ll_tokenizer)


class OracleDrafter:
    """Test drafter: a random-length prefix of the known answer plus random noise branches (seeded)."""

    name = "oracle"

    def __init__(self, answer: Sequence[int], vocab: int, seed: int = 0, noise: int = 4) -> None:
        self.answer = list(answer)
        self.vocab = vocab
        self.rng = random.Random(seed)
        self.noise = noise

    def propose(self, state: DraftState, budget: int) -> TokenTree:
        at = len(state.output)
        tree = TokenTree(root=state.output[-1], budget=budget)
        tree.add_path(self.answer[at : at + self.rng.randint(0, 12)], "oracle")
        for _ in range(self.noise):
            keep = self.rng.randint(0, 5)
            wrong = [self.rng.randrange(self.vocab) for _ in range(self.rng.randint(1, 4))]
            tree.add_path(self.answer[at : at + keep] + wrong, "noise")
        return tree
