"""Plain decoding: one forward per token, greedy or sampled; the server's default generator.

Greedy requests (temperature 0) choose with the shared
:class:`~agentspec.engine.greedy.GreedyChooser`, so this path and the
ToolSpec decoder agree token for token; sampled ones draw from the softmax
at the request's temperature, cut to ``top_p``, with their own seeded
generator.  Under a tool grammar, the tokens the grammar forces are emitted
without a choice, all of them in one forward (their logits still give each
one's log probability).  :class:`PlainGenerator` implements
:class:`~agentspec.engine.generation.Generator`.
"""

from __future__ import annotations

import random
from typing import Any

from agentspec.engine.generation import SamplingParams, TokenOut
from agentspec.engine.grammar import GrammarConstraint
from agentspec.engine.greedy import NEAR_TIE, GreedyChooser, token_logprobs
from agentspec.engine.kv_cache import Reuse, TargetSequence
from agentspec.engine.model import LocalModel, require

__all__ = ["PlainGenerator", "PlainStream"]


class PlainGenerator:
    """Plain decoding for any model (module docstring); it needs no request context."""

    def context(self, tools: list[dict[str, Any]], messages: list[dict[str, Any]],
                hints: list[tuple[str, str]]) -> None:
        return None

    def start(
        self, lm: LocalModel, prompt: list[int], params: SamplingParams, *, reuse: Reuse = (0, []),
        constraint: GrammarConstraint | None = None, prefill_chunk: int = 2048,
        context: object | None = None,
    ) -> PlainStream:
        return PlainStream(lm, prompt, params, reuse, constraint, prefill_chunk)


class PlainStream:
    """One request on the plain path, between steps (a :class:`~agentspec.engine.generation.TokenStream`)."""

    def __init__(
        self, lm: LocalModel, prompt: list[int], params: SamplingParams, reuse: Reuse,
        constraint: GrammarConstraint | None, prefill_chunk: int,
    ) -> None:
        self.torch = require("torch")
        self.lm, self.params, self.constraint = lm, params, constraint
        self.seq = TargetSequence(lm, reuse)
        self.cached = self.seq.length
        self.covered = list(prompt[: self.cached])
        self.pending = list(prompt[self.cached :])
        self.chunk = prefill_chunk
        self.chooser = GreedyChooser(
            lm.stop_token_ids, matcher=constraint.matcher if constraint is not None else None,
            vocab_size=lm.vocab_size, ignore_eos=params.ignore_eos, top_logprobs=params.top_logprobs,
        )
        self.next_logits: Any = None
        self.generated = 0
        seed = params.seed if params.seed is not None else random.getrandbits(62)
        self.rng = self.torch.Generator().manual_seed(seed)

    @property
    def prefilled(self) -> bool:
        return not self.pending

    def layers(self) -> list[tuple[Any, Any]]:
        return self.seq.layers()

    def _forward(self, ids: list[int], keep: int = 1) -> Any:
        logits = self.seq.forward(ids, keep)
        self.covered.extend(ids)
        return logits

    def prefill(self) -> None:
        """Compute the next chunk of the prompt."""
        chunk, self.pending = self.pending[: self.chunk], self.pending[self.chunk :]
        self.next_logits = self._forward(chunk)[-1]

    def decode(self) -> tuple[list[TokenOut], str | None]:
        """The next token(s) and, when generation must end, why ("stop" or "length")."""
        if self.constraint is not None:
            forced = self.constraint.forced()[: self.params.max_tokens - self.generated]
            if forced:
                return self._emit_forced(forced)
        out = self._choose()
        if self.chooser.is_stop(out.id):
            return [], "stop"
        self.generated += 1
        if self.constraint is not None:
            self.constraint.consume([out.id])
        finish = self._finish()
        if finish is None:
            self.next_logits = self._forward([out.id])[-1]
        return [out], finish

    def close(self) -> None:
        """Nothing to release: the cache is all this request holds, and the engine keeps it for reuse."""

    def _finish(self) -> str | None:
        if self.generated >= self.params.max_tokens:
            return "length"
        if self.constraint is not None and self.constraint.done:
            return "stop"
        return None

    def _emit_forced(self, forced: list[int]) -> tuple[list[TokenOut], str | None]:
        assert self.constraint is not None
        self.constraint.consume(forced)
        self.generated += len(forced)
        # One forward over all forced tokens: the logits after each give the next one's log probability
        # (and the KV of a finished call serves the next turn's prefix).
        after = self._forward(forced, keep=len(forced))
        rows = [self.next_logits, *after[:-1]]
        self.next_logits = after[-1]
        return [self._describe(row, token) for row, token in zip(rows, forced)], self._finish()

    def _choose(self) -> TokenOut:
        if self.params.temperature == 0:
            choice = self.chooser.choose(self.next_logits, NEAR_TIE)
            return TokenOut(id=choice.token, logprob=choice.logprob, top=choice.top)
        return self._describe(self.next_logits, self._sample())

    def _sample(self) -> int:
        torch = self.torch
        logits = self.next_logits.clone()
        if self.constraint is not None:
            logits[torch.from_numpy(~self.constraint.allowed())] = float("-inf")
        if self.params.ignore_eos and self.constraint is None:  # a finished grammar may allow nothing but the end
            logits[list(self.lm.stop_token_ids)] = float("-inf")
        probs = torch.softmax(logits / self.params.temperature, dim=-1)
        if self.params.top_p < 1:
            sorted_probs, order = torch.sort(probs, descending=True)
            drop = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= self.params.top_p
            probs[order[drop]] = 0
        return int(torch.multinomial(probs, 1, generator=self.rng))

    def _describe(self, logits: Any, token: int) -> TokenOut:
        logprob, top = token_logprobs(logits, token, self.params.top_logprobs)
        return TokenOut(id=token, logprob=logprob, top=top)
