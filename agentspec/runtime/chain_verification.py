"""Chain verification: would the authority itself have made a pre-executed chain of calls? (lossless SMC)

SMC as published commits a macro's drafts once the authority confirms its anchor, without asking about the
rest: lossy.  Speculative decoding's answer, one level up: the drafts' calls are the speculator's, the
observations between them are real (they came from the forks), so the authority scores the whole chain in one
forward with the observations as forced context, and the longest prefix of calls that are its own greedy choice
commits (:mod:`agentspec.runtime.macro_commit`).

The seam is :class:`VerifiesChains`: a policy that can verify says so, and says at start-up whether it really can
(:meth:`VerifiesChains.verification`: a model endpoint may lack both ways to verify).  Implementations:
:class:`~agentspec.runtime.policies.scripted.OracleAuthority` (decides at each prefix: :func:`verify_by_deciding`),
:class:`~agentspec.runtime.policies.llm.LLMPolicy` (``agentspec serve``'s ``/v1/agentspec/verify_chain``, or an
endpoint's prompt log-probabilities), and :class:`~agentspec.runtime.simulated.SimulatedLatency`, which forwards
to the policy it wraps and charges the verification's simulated time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentspec.types import Observation, ToolCall

Chain = Sequence[tuple[ToolCall, Observation]]
"""Pre-executed steps after the committed history, oldest first: each draft's call and its fork's observation."""
Prefix = Sequence[tuple[ToolCall, Observation | None]]
"""The committed history a chain continues (the :data:`~agentspec.runtime.policies.protocol.History` policies decide on)."""

MAX_CHAIN = 16
"""Steps one verification request may carry (``agentspec serve`` refuses more); a longer chain is verified in its
first :data:`MAX_CHAIN` steps, the rest stay drafts."""

VERIFIED = "verified"
TRUSTED = "trusted"


@dataclass(frozen=True)
class ChainVerdict:
    """How much of a chain the authority makes itself."""

    accepted: int
    """Leading steps whose call is the authority's own greedy choice (0..steps)."""
    steps: int
    """Steps examined."""
    next_text: str | None = None
    """The authority's own first tokens of its next turn after the accepted prefix, where the endpoint reports them."""
    forwards: int = 0
    """Model forwards the verification took (0: no model ran, e.g. the oracle)."""
    prompt_tokens: int = 0
    """Tokens the verification prefilled (the chain's, on top of the cached context)."""
    seconds: float = 0.0
    """Time the verification took: measured for a real endpoint, charged for a simulated one."""

    @property
    def rejected(self) -> bool:
        """Whether a step was examined and refused (the steps after it were not judged)."""
        return self.accepted < self.steps


@runtime_checkable
class VerifiesChains(Protocol):
    """A policy that can tell how much of a pre-executed chain it would have decided itself."""

    async def verify_chain(self, history: Prefix, chain: Chain) -> ChainVerdict:
        """The longest prefix of ``chain`` (after ``history``) whose every call is this policy's own decision.
        No side effects: the next :meth:`decide` is as if the verification never happened."""
        ...

    async def verification(self) -> str | None:
        """None when :meth:`verify_chain` works; else why it cannot (probed once, then cached)."""
        ...


async def verification_of(policy: object) -> str | None:
    """None when ``policy`` can verify chains, else the reason it cannot."""
    if not isinstance(policy, VerifiesChains):
        return f"the authority ({type(policy).__name__}) cannot verify chains"
    return await policy.verification()


async def commit_mode(authority: object, wanted: str) -> str:
    """What SMC's macro commit will be for ``authority`` when ``wanted`` (``verified`` or ``trusted``): the
    summary's ``macro_commit``, e.g. ``"trusted (verification unavailable: <reason>)"`` when it cannot verify."""
    if wanted != VERIFIED:
        return TRUSTED
    reason = await verification_of(authority)
    return VERIFIED if reason is None else f"{TRUSTED} (verification unavailable: {reason})"


async def verify_by_deciding(decide: Callable[[Prefix], Awaitable[ToolCall | None]], history: Prefix,
                             chain: Chain) -> ChainVerdict:
    """The reference semantics: decide at each prefix of ``chain`` and accept while the decision is the chain's
    call.  Exact for a deterministic policy without side effects (the oracle); a model verifies in one forward
    instead, with the same answer under greedy decoding."""
    steps = list(chain)[:MAX_CHAIN]
    for index, (call, _) in enumerate(steps):
        if await decide([*history, *steps[:index]]) != call:
            return ChainVerdict(accepted=index, steps=len(steps))
    return ChainVerdict(accepted=len(steps), steps=len(steps))
