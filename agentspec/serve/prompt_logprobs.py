"""``prompt_logprobs`` on ``/v1/chat/completions`` (vLLM's extension): how likely the model finds each prompt token.

The response's top-level ``prompt_logprobs`` is aligned with the prompt's
tokens: ``None`` for the first, then per token a dict from token id (as a
string) to ``{"logprob", "rank", "decoded_token"}`` holding the prompt token
itself (its true rank: 1 is the argmax) and the ``N`` likeliest tokens.  A
client verifies a chain of calls through it (every call token rank 1:
:mod:`agentspec.serve.chain_verification` does it exactly, under the tool grammar).

Cached key/values carry no logits, so the prompt is computed in full
(:class:`PromptLogprobJob`, in prefill-sized units of the engine's steps);
its key/values then go into the prefix cache, and the generation that follows
reuses all of it but the last token.  The logits are read a few hundred rows
at a time: a whole prompt's would be prompt x vocabulary floats (5 GB for
9,000 tokens of Qwen).
"""

from __future__ import annotations

from typing import Any

from agentspec.engine.kv_cache import Reuse
from agentspec.engine.model import LocalModel, require
from agentspec.engine.sequence_job import SequenceJob

__all__ = ["HEAD_ROWS", "PromptLogprobJob"]

HEAD_ROWS = 256
"""Prompt rows whose logits are computed at once (256 x 151,936 floats: 155 MB for Qwen)."""

Entry = dict[str, dict[str, Any]] | None


class PromptLogprobJob(SequenceJob):
    """The prompt's log-probabilities as an engine job (:class:`~agentspec.engine.scheduler.ForwardJob`)."""

    runs_model = False

    def __init__(self, lm: LocalModel, prompt: list[int], top: int, *, prefill_chunk: int = 2048) -> None:
        # The last prompt token predicts nothing in the prompt: the generation computes it.
        super().__init__(lm, prompt[:-1], prefill_chunk=prefill_chunk)
        self.lookup_tokens: list[int] = []  # nothing is reused: cached positions have no logits
        self.prompt = prompt
        self.top = top
        self.entries: list[Entry] = [None]

    @property
    def prefilled(self) -> bool:
        return self._remaining <= 0

    def start(self, reuse: Reuse) -> None:
        self._open((0, []))  # cached positions have no logits: every row is computed

    def prefill(self) -> None:
        """Compute the next chunk and the log-probabilities of the tokens its rows predict."""
        assert self.seq is not None
        start = len(self._covered)
        chunk = self._next_chunk()
        hidden = self.seq.forward_hidden(chunk)
        self._covered.extend(chunk)
        for first in range(0, len(chunk), HEAD_ROWS):
            rows = list(range(first, min(first + HEAD_ROWS, len(chunk))))
            logits = self.seq.logits(hidden, rows)
            targets = self.prompt[start + first + 1: start + rows[-1] + 2]
            self.entries.extend(self._describe(logits, targets))

    def run(self) -> list[Entry]:
        return self.entries

    def _describe(self, logits: Any, targets: list[int]) -> list[Entry]:
        torch = require("torch")
        logprobs = torch.log_softmax(logits, dim=-1)
        index = torch.tensor(targets, dtype=torch.long)[:, None]
        chosen = logprobs.gather(1, index)
        ranks = (logprobs > chosen).sum(dim=1) + 1
        best_values, best_ids = torch.topk(logprobs, self.top) if self.top else (None, None)
        out: list[Entry] = []
        for row, token in enumerate(targets):
            entry = {str(token): self._one(token, float(chosen[row, 0]), int(ranks[row]))}
            if best_ids is not None and best_values is not None:
                for rank, (other, value) in enumerate(zip(best_ids[row].tolist(), best_values[row].tolist()), 1):
                    entry.setdefault(str(other), self._one(other, value, rank))
            out.append(entry)
        return out

    def _one(self, token: int, logprob: float, rank: int) -> dict[str, Any]:
        return {"logprob": logprob, "rank": rank,
                "decoded_token": self.lm.token_bytes(token).decode("utf-8", "replace")}
