"""Simulated model latency: wrappers that charge a latency model's time around a real policy or prober.

A scripted policy (:class:`~agentspec.runtime.policies.scripted.OracleAuthority`,
:class:`~agentspec.runtime.policies.scripted.NoisyOracleSpeculator`) answers at once.
To study it at GPU-scale speeds, whoever builds the run wraps it:
:class:`SimulatedLatency` makes each decision take the latency model's time
for its role on the run's clock (prefill, then decode), and streams that
decode so SPORK can probe it; :class:`SimulatedProbeLatency` makes each probe
take the time to decode the call it returns.  Unwrapped policies (real
models) take no simulated time: theirs is real.

A chain verification (:meth:`SimulatedLatency.verify_chain`, lossless SMC) is charged as one request that
prefills only the chain on top of the cached context: ``overhead_s + chain tokens / prefill_tokens_per_s``, the
chain's tokens being ``tokens_per_step`` per step (the prompt growth the latency model charges each later decision
for the same steps; without it, the calls' and observations' estimated tokens).  Nothing is decoded: the answer is
read off the forward.  Under ``smc-paper`` a decision prefills its whole prompt (9,000 + 120 tokens per step, about
0.93 s, as the SMC paper's authority time implies) and decodes 200 tokens (4 s), while verifying a 2-step chain
prefills 240 tokens: 0.024 s.

The one simulated decode loop is :func:`simulate_decode`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import anyio

from agentspec.errors import ConfigError
from agentspec.runtime.chain_verification import Chain, ChainVerdict, Prefix, VerifiesChains, verification_of
from agentspec.runtime.latency import LatencyModel, ModelLatency, estimate_tokens
from agentspec.runtime.policies.protocol import Decision, History, Policy, Progress, committed_steps
from agentspec.runtime.probe import Prober, ProbeResult

Role = Literal["authority", "speculator"]


async def simulate_decode(model: ModelLatency, decision: Decision, prompt_tokens: int,
                          progress: Progress | None = None, every: int = 1) -> None:
    """Sleep the time ``model`` takes to prefill ``prompt_tokens`` and decode ``decision``'s tokens.

    Without ``progress``, one sleep of :meth:`ModelLatency.seconds`.  With it, prefill first, then decode
    (hidden reasoning, then the call) in chunks of ``every`` tokens (the first chunk one token), reporting
    the tokens decoded so far after each chunk.  Sets the decision's token counts to the ones charged.
    """
    decision.prompt_tokens, decision.output_tokens = prompt_tokens, decision.output_tokens or 1
    if progress is None:
        await anyio.sleep(model.seconds(prompt_tokens, decision.output_tokens))
        return
    await anyio.sleep(model.seconds(prompt_tokens, 0) - model.reasoning_tokens / model.decode_tokens_per_s)
    total = model.reasoning_tokens + decision.output_tokens
    done = 0
    while done < total:
        chunk = min(every if done else 1, total - done)
        await anyio.sleep(chunk / model.decode_tokens_per_s)
        done += chunk
        await progress("", done)


@dataclass(init=False)
class SimulatedLatency:
    """``policy``'s decisions, each taking ``latency``'s time for ``role`` (none when it has no model for it).

    ``latency`` is a :class:`LatencyModel`, or a preset's name (``"smc-paper"``) or a latency model file.

    The prompt is sized by the committed steps of the history (a speculator's own drafts extend its
    cached prompt).  ``stream_every``: tokens per progress report when streamed (SPORK's ``probe_every``).
    """

    policy: Policy
    latency: LatencyModel
    role: Role = "authority"
    stream_every: int = 1

    def __init__(self, policy: Policy, latency: LatencyModel | str, role: Role = "authority",
                 stream_every: int = 1) -> None:
        self.policy, self.role, self.stream_every = policy, role, stream_every
        # A preset's name or a file, as Executor(latency=...) takes it.
        self.latency = LatencyModel.load(latency) if isinstance(latency, str) else latency

    def _model(self) -> ModelLatency | None:
        return self.latency.authority if self.role == "authority" else self.latency.speculator

    async def decide(self, history: History) -> Decision:
        decision = await self.policy.decide(history)
        model = self._model()
        if model is not None:
            await simulate_decode(model, decision, self.latency.prompt_tokens(committed_steps(history)))
        return decision

    async def decide_streaming(self, history: History, progress: Progress, request_id: str | None = None) -> Decision:
        """Like :meth:`decide`, reporting decode progress as it goes (``request_id`` is for servers: unused)."""
        decision = await self.policy.decide(history)
        model = self._model()
        if model is None:
            await progress("", 1)  # no model time: the whole answer is there at once
            return decision
        await simulate_decode(model, decision, self.latency.prompt_tokens(committed_steps(history)), progress,
                              self.stream_every)
        return decision

    async def verification(self) -> str | None:
        """Whether the wrapped policy can verify chains (None) or why not."""
        return await verification_of(self.policy)

    async def verify_chain(self, history: Prefix, chain: Chain) -> ChainVerdict:
        """The wrapped policy's verdict, taking the time to prefill the chain on the cached context (module
        docstring); the verdict reports the tokens and seconds charged."""
        if not isinstance(self.policy, VerifiesChains):
            raise ConfigError(f"{type(self.policy).__name__} cannot verify chains (ask verification() first)")
        verdict = await self.policy.verify_chain(history, chain)
        model = self._model()
        if model is None:
            return verdict
        tokens = chain_tokens(self.latency, chain[:verdict.steps])
        seconds = model.overhead_s + tokens / model.prefill_tokens_per_s
        await anyio.sleep(seconds)
        return replace(verdict, prompt_tokens=tokens, seconds=seconds, forwards=max(verdict.forwards, 1))


def chain_tokens(latency: LatencyModel, chain: Chain) -> int:
    """Tokens a verification prefills: ``tokens_per_step`` per step (what a committed step adds to every later
    decision's prompt, so both are priced alike), else the calls' and observations' estimated tokens."""
    if latency.tokens_per_step:
        return latency.tokens_per_step * len(chain)
    return sum(estimate_tokens(call.canonical()) + estimate_tokens(observation.content) for call, observation in chain)


def untimed(policy: Policy) -> Policy:
    """``policy`` without its simulated time, for checks off the critical path (SMC's macro verification)."""
    return policy.policy if isinstance(policy, SimulatedLatency) else policy


@dataclass
class SimulatedProbeLatency:
    """``prober``'s probes, each taking the time the authority's model decodes the call it returns.

    The probe shares the authority's prompt, which is cached, so only the returned tokens are charged.
    """

    prober: Prober
    latency: LatencyModel

    async def probe(self, history: History, partial: str, hint_for: str | None = None) -> ProbeResult:
        result = await self.prober.probe(history, partial, hint_for)
        if self.latency.authority is not None:
            await anyio.sleep(max(result.tokens, 1) / self.latency.authority.decode_tokens_per_s)
        return result
