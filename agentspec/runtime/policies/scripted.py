"""Scripted policies for studying the runtime: the oracle authority replays a task's gold calls, the noisy oracle
speculator guesses them right with probability ``p`` (seeded, so runs are reproducible).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from agentspec.runtime.chain_verification import Chain, ChainVerdict, verify_by_deciding
from agentspec.runtime.latency import estimate_tokens
from agentspec.runtime.policies.protocol import Decision, History
from agentspec.types import ToolCall


def gold_pointer(gold: Sequence[ToolCall], history: History) -> int:
    """How many gold calls the history has made, in order (extra or wrong calls are skipped over)."""
    pointer = 0
    for call, _ in history:
        if pointer < len(gold) and call == gold[pointer]:
            pointer += 1
    return pointer


DONE = "done"
"""A gold call of this name is the end of the task; its arguments are the final answer (GAIA's ``answer``)."""


def next_gold(gold: Sequence[ToolCall], history: History) -> ToolCall | None:
    """The next gold call after ``history``; None once the gold calls (or a gold ``done``) are reached."""
    pointer = gold_pointer(gold, history)
    call = gold[pointer] if pointer < len(gold) else None
    return None if call is None or call.name == DONE else call


@dataclass
class OracleAuthority:
    """Makes the task's gold calls in order, then says done (with a gold ``done`` call's arguments as its final)."""

    gold: list[ToolCall]

    async def decide(self, history: History) -> Decision:
        call = next_gold(self.gold, history)
        if call is None:
            pointer = gold_pointer(self.gold, history)
            final = self.gold[pointer].arguments if pointer < len(self.gold) else None
            return Decision(call=None, output_tokens=1, final=final)
        return Decision(call=call, output_tokens=estimate_tokens(call.canonical()))

    async def verification(self) -> str | None:
        return None  # deciding is pure: it verifies by deciding at each prefix

    async def verify_chain(self, history: History, chain: Chain) -> ChainVerdict:
        """The chain's longest prefix of gold calls in order (deciding at each prefix; no side effects)."""

        async def decide(prefix: History) -> ToolCall | None:
            return (await self.decide(prefix)).call

        return await verify_by_deciding(decide, history, chain)


@dataclass
class NoisyOracleSpeculator:
    """Predicts the true next call with probability ``p``, otherwise a plausible wrong one.

    Wrong calls come from ``distractors`` (other tasks' calls, read-only checks).
    Draws are seeded by (seed, task, the calls so far), so runs are reproducible.
    """

    gold: list[ToolCall]
    p: float
    distractors: list[ToolCall]
    task_id: str = ""
    seed: int = 0

    async def decide(self, history: History) -> Decision:
        truth = next_gold(self.gold, history)
        # Seeded by the context (what a model would condition on), so a new context is a new draw.
        context = "|".join(call.canonical() for call, _ in history)
        digest = hashlib.sha256(f"{self.seed}|{self.task_id}|{context}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        if rng.random() < self.p:
            call = truth
        else:
            wrong = [d for d in self.distractors if d != truth]
            call = rng.choice(wrong) if wrong else None
        call = call.model_copy(update={"id": f"spec_{len(history)}"}) if call else None
        return Decision(call=call, output_tokens=estimate_tokens(call.canonical()) if call else 1)
