"""The greedy choice, shared by every decoding path: the argmax over the tokens the grammar allows.

:class:`GreedyChooser` is the one definition of "greedy" in agentspec: the
server's plain path (:mod:`agentspec.engine.plain`), the ToolSpec verifier
(:mod:`agentspec.decoding.verifier`) and the sidecar all choose through it,
which is what makes tree decoding token-for-token identical to plain greedy
decoding.  Stop tokens end the generation unless ``ignore_eos``; with a
grammar (an llguidance matcher), only the tokens it allows count.  Each
:class:`Choice` carries the margin to the runner-up, so callers can tell
near ties (module :mod:`agentspec.decoding.verifier`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agentspec.engine.model import require

__all__ = ["NEAR_TIE", "Choice", "GreedyChooser", "token_logprobs"]

NEAR_TIE = 1e-3
"""Logit margin under which a greedy choice counts as a near tie (about 20x the rounding seen here)."""


@dataclass(frozen=True, slots=True)
class Choice:
    """One greedy decision: the token, its log probability (before any grammar mask), the margin to the runner-up."""

    token: int
    logprob: float
    margin: float
    runner_up: int
    top: tuple[tuple[int, float], ...] = ()


def token_logprobs(logits: Any, token: int, top_logprobs: int = 0) -> tuple[float, tuple[tuple[int, float], ...]]:
    """``token``'s log probability under ``logits`` (no grammar mask) and the ``top_logprobs`` likeliest tokens'."""
    torch = require("torch")
    lse = torch.logsumexp(logits, dim=-1)
    top: tuple[tuple[int, float], ...] = ()
    if top_logprobs:
        values, ids = torch.topk(logits - lse, top_logprobs)
        top = tuple(zip(ids.tolist(), values.tolist()))
    return float(logits[token] - lse), top


class GreedyChooser:
    """Greedy choice with an optional llguidance matcher (consumed as tokens are committed) and stop tokens.

    ``matcher`` is the request's live grammar state (or None); the chooser
    consumes every committed token into it.
    """

    def __init__(
        self, stop_ids: frozenset[int], *, matcher: Any = None, vocab_size: int, ignore_eos: bool = False,
        top_logprobs: int = 0,
    ) -> None:
        self.torch = require("torch")
        self.stop_ids = stop_ids
        self.matcher = matcher
        self.vocab_size = vocab_size
        self.ignore_eos = ignore_eos
        self.top_logprobs = top_logprobs
        self._stops = sorted(stop_ids)

    def _bits(self) -> np.ndarray:
        # The grammar's token mask, exactly what constrained plain greedy applies.  (validate_tokens() is
        # laxer: where bytes are forced, the mask allows only their canonical first token, e.g. '"' and not
        # '"}' before '}}'; accepting by validate_tokens would diverge from plain greedy.)
        return np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8)

    def _allowed(self, token: int, bits: np.ndarray | None) -> bool:
        if token in self.stop_ids and self.ignore_eos:
            return False
        if bits is None:
            return True
        return bool((bits[token >> 3] >> (token & 7)) & 1)

    def _masked(self, logits: Any, bits: np.ndarray | None) -> Any:
        torch = self.torch
        masked = logits.clone()
        if bits is not None:
            allowed = np.unpackbits(bits, bitorder="little")[: logits.shape[-1]].astype(bool)
            masked[torch.from_numpy(~allowed)] = float("-inf")
        if self.ignore_eos and self._stops:
            masked[self._stops] = float("-inf")
        return masked

    def choose(self, logits: Any, near_tie: float) -> Choice:
        """The greedy token for this row of logits (1D, full vocabulary)."""
        torch = self.torch
        bits = self._bits() if self.matcher is not None else None
        values, ids = torch.topk(logits, 2)
        raw, second = int(ids[0]), int(ids[1])
        margin = float(values[0] - values[1])
        if self._allowed(raw, bits):
            token = raw
            if margin < near_tie and not self._allowed(second, bits):
                # The raw runner-up is not a legal choice: measure against the best legal one.
                values, ids = torch.topk(self._masked(logits, bits), 2)
                second, margin = int(ids[1]), float(values[0] - values[1])
        else:
            values, ids = torch.topk(self._masked(logits, bits), 2)
            token, second, margin = int(ids[0]), int(ids[1]), float(values[0] - values[1])
        logprob, top = token_logprobs(logits, token, self.top_logprobs)
        return Choice(token=token, logprob=logprob, margin=margin, runner_up=second, top=top)

    def is_stop(self, token: int) -> bool:
        return token in self.stop_ids and not self.ignore_eos

    def commit(self, token: int) -> bool:
        """Consume ``token`` into the grammar; True when the grammar is now complete."""
        if self.matcher is None:
            return False
        if not self.matcher.consume_tokens([token]):
            raise RuntimeError(f"the grammar rejected token {token}: {self.matcher.get_error()}")
        return bool(self.matcher.is_stopped())
