"""The governor: speculation never makes an agent slower.

A speculator that shares the authority's machine (a model on the same cores) slows the authority's decisions while
it runs; a speculator that rarely guesses right saves little.  The governor measures both during a run, per
speculator, and pauses one whose cost exceeds its saving:

* **cost**: how much longer the authority's decisions take while the speculator runs.  Each decision is observed
  with the share of its time each speculator had a request in flight (:meth:`Governor.speculating`); the decisions
  no speculator overlapped are the baseline.  Decisions differ in length by where they fall in a task (a first call
  prefills the ticket, a last "done" is short), so each is compared with the baseline of its own *stratum* (how
  many steps the task had committed, the last stratum pooling the rest).  A speculator's slowdown is the mean, over
  the decisions it overlapped, of (duration - its stratum's baseline mean), per unit of overlap, and its cost that
  slowdown times the overlap it had in all, plus any time the authority waited for its guess (:meth:`observe_wait`,
  draft-first).
* **saving**: tool time its committed drafts hid (:meth:`observe_saving`) and authority decisions its drafts made
  unnecessary (:meth:`observe_skipped`, valued at the baseline's mean decision time).

A verdict needs evidence (``min_overlapped`` decisions the speculator overlapped and ``min_clean`` baseline ones)
and a margin: the speculator is paused only when the lower confidence bound of its cost (``z`` standard errors
below the estimate) exceeds its saving.  While a stratum the speculator overlapped has too small a baseline, the
governor asks the executor to hold speculation for one decision of that stratum in ``hold_every``
(:meth:`Governor.hold`), which is how it gets one.  A paused speculator
may be re-probed after ``reprobe_after`` decisions (its overlap evidence starts again).

Verified macro commits (lossless SMC) have a cost of their own, on every clock: the authority's verification of a
fired chain is on the critical path, and a chain it rejects saved nothing.  The governor keeps that account too
(:meth:`observe_verification`): the seconds verifications took against the decisions their accepted steps spared
(each valued at the mean decision observed), and once ``min_verifications`` have been made and they cost more than
they saved, it pauses macro commits for the mode (:meth:`verifying`); SA goes on.  Its report names it
:data:`VERIFICATION`.

One governor serves a whole mode (every task, also concurrent ones): the evidence accumulates across tasks.  It
only observes and decides; the executor (:class:`~agentspec.runtime.executor.ExecutionLoop`) tells it what
happened, and :class:`SpeculatorPanel` asks only the speculators it lets run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

import anyio

from agentspec.runtime.draft import Draft
from agentspec.runtime.policies import Decision, History, Policy

CLEAN = 0.05
"""A decision is a baseline sample when no speculator was busy for more than this share of it."""
OVERLAPPED = 0.25
"""A decision counts as overlapped by a speculator busy for at least this share of it (and no other busy)."""
STRATA = 4
"""Decisions are compared within strata by the steps committed before them: 0, 1, 2, and 3 or more."""
CLEAN_PER_STRATUM = 2
"""Baseline decisions a stratum needs before the governor stops holding speculation for it."""


VERIFICATION = "smc verification"
"""The governor report's entry for verified macro commits (beside one entry per speculator)."""


def stratum_of(steps: int) -> int:
    """The stratum of a decision made after ``steps`` committed steps."""
    return min(steps, STRATA - 1)


@dataclass(frozen=True)
class GovernorConfig:
    """How much evidence a verdict needs, and how sure it must be."""

    min_overlapped: int = 4
    min_clean: int = 3
    confidence: float = 0.95
    """One-sided: the cost estimate is lowered by Student's t quantile (0.95 or 0.99) times its standard error
    before it is compared with the saving; few samples mean a wide margin."""
    margin: float = 0.05
    """And the cost's lower bound must exceed the saving by this share of the authority's decision time so far
    (at the baseline's pace): a speculator costing a few milliseconds in noise is not worth a verdict."""
    hold_every: int | None = 2
    """Once a speculator has ``min_overlapped`` overlapped decisions but baseline ones are missing: hold
    speculation for one decision in this many until there are ``min_clean`` (None: never hold)."""
    reprobe_after: int | None = None
    """Let a paused speculator run again after this many decisions (None: it stays paused for the mode)."""
    pauses: bool = True
    """Whether a verdict pauses a speculator; False only measures and reports (the virtual clock, where a
    speculator cannot slow the authority and a difference between decisions is only their own length).  Macro
    verifications are judged on every clock: their time is on the critical path wherever it is counted."""
    min_verifications: int = 5
    """Chain verifications before macro commits may be paused for costing more than they saved."""


@dataclass
class _Busy:
    """A speculator's busy clock: seconds it had at least one request in flight."""

    in_flight: int = 0
    since: float = 0.0
    total: float = 0.0

    def clock(self, now: float) -> float:
        return self.total + (now - self.since if self.in_flight else 0.0)


@dataclass
class _Account:
    """What the governor knows of one speculator."""

    busy: _Busy = field(default_factory=_Busy)
    overlapped: list[tuple[float, float, int]] = field(default_factory=list)
    """(decision seconds, share of it this speculator was busy, stratum) of the decisions it alone overlapped."""
    share_total: float = 0.0
    """Sum over every decision of the share this speculator was busy: the overlap its cost is charged for."""
    wait_s: float = 0.0
    saving_s: float = 0.0
    decisions: int = 0
    """Decisions it overlapped at all."""
    paused: bool = False
    paused_at_step: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Mark:
    """A moment the governor was told of (a decision or a wait starting): the clock and each busy clock then."""

    at: float
    busy: dict[str, float]


@dataclass
class _Verifications:
    """What verified macro commits cost and saved in a mode."""

    count: int = 0
    spent_s: float = 0.0
    accepted: int = 0
    paused: bool = False
    paused_at_step: int | None = None
    reason: str | None = None


class Governor:
    """Measures each named speculator's cost and saving, and pauses the ones that cost more (module docstring)."""

    def __init__(self, names: Sequence[str], config: GovernorConfig | None = None) -> None:
        self.config = config or GovernorConfig()
        self.accounts = {name: _Account() for name in names}
        self.verifications = _Verifications()
        self.calls_decided: list[float] = []
        """The seconds of every decision that was a tool call: what a macro's accepted step spares, on average (a
        macro holds no message to the user, whose decisions are often longer)."""
        self.clean: list[float] = []
        self.clean_by_stratum: dict[int, list[float]] = {}
        self.steps = 0
        """Authority decisions observed so far (a pause's ``paused_at_step``)."""
        self._since_hold = 0

    # -- what the speculators do ------------------------------------------------------------

    def active(self, name: str) -> bool:
        """Whether ``name`` may speculate now."""
        return not self.accounts[name].paused

    @contextmanager
    def speculating(self, name: str) -> Iterator[None]:
        """Wrap one request of speculator ``name`` (its busy clock runs while any is in flight)."""
        self.observe_speculation_started(name)
        try:
            yield
        finally:
            self.observe_speculation_ended(name)

    def observe_speculation_started(self, name: str) -> None:
        busy = self.accounts[name].busy
        if busy.in_flight == 0:
            busy.since = anyio.current_time()
        busy.in_flight += 1

    def observe_speculation_ended(self, name: str) -> None:
        busy = self.accounts[name].busy
        busy.in_flight -= 1
        if busy.in_flight == 0:
            busy.total += anyio.current_time() - busy.since

    # -- what the authority does --------------------------------------------------------------

    def hold(self, stratum: int = 0) -> bool:
        """An authority decision of ``stratum`` is about to start: whether to run it without speculation (no
        speculator request in flight), for a baseline sample.  Only while an active speculator has overlapped
        decisions of that stratum (once it has the evidence for a verdict in all) and the stratum's baseline is
        short, and only for one decision in ``hold_every``."""
        self._since_hold += 1
        every = self.config.hold_every
        if every is None or self._since_hold < every:
            return False
        clean = len(self.clean_by_stratum.get(stratum, []))
        if clean >= CLEAN_PER_STRATUM and len(self.clean) >= self.config.min_clean:
            return False
        evidence = any(not a.paused and len(a.overlapped) >= self.config.min_overlapped
                       and any(k == stratum for _, _, k in a.overlapped) for a in self.accounts.values())
        if evidence:
            self._since_hold = 0
        return evidence

    def mark(self) -> Mark:
        """Now, for a later :meth:`observe_decision` or :meth:`observe_wait`."""
        now = anyio.current_time()
        return Mark(now, {name: a.busy.clock(now) for name, a in self.accounts.items()})

    def _shares(self, mark: Mark) -> tuple[float, dict[str, float]]:
        now = anyio.current_time()
        span = now - mark.at
        if span <= 0:
            return 0.0, {name: 0.0 for name in self.accounts}
        return span, {name: min(1.0, (a.busy.clock(now) - mark.busy[name]) / span) for name, a in self.accounts.items()}

    def observe_decision(self, mark: Mark, stratum: int = 0, *, tool_call: bool = True) -> None:
        """An authority decision of ``stratum`` (:func:`stratum_of`) that started at ``mark`` ended now;
        ``tool_call``: it was a call of a tool (not a message to the user or the end)."""
        seconds, shares = self._shares(mark)
        self.steps += 1
        if tool_call:
            self.calls_decided.append(seconds)
        busy = [name for name, share in shares.items() if share > CLEAN]
        if not busy:
            self.clean.append(seconds)
            self.clean_by_stratum.setdefault(stratum, []).append(seconds)
        for name, share in shares.items():
            account = self.accounts[name]
            account.share_total += share
            account.decisions += int(share > CLEAN)
            if share >= OVERLAPPED and busy == [name]:
                account.overlapped.append((seconds, share, stratum))
        self._judge()

    def observe_wait(self, mark: Mark) -> None:
        """The authority waited from ``mark`` until now for the speculators' guess (draft-first): charged to each
        by the share of the wait it was busy."""
        seconds, shares = self._shares(mark)
        for name, share in shares.items():
            self.accounts[name].wait_s += seconds * share

    def observe_saving(self, name: str, seconds: float) -> None:
        """A committed draft of ``name`` spared the authority ``seconds`` (tool time it hid)."""
        self.accounts[name].saving_s += max(0.0, seconds)

    def observe_skipped(self, name: str, decisions: int) -> None:
        """Drafts of ``name`` were committed without asking the authority ``decisions`` times (a macro commit)."""
        self.accounts[name].saving_s += decisions * self.baseline_s()

    def observe_committed(self, draft: Draft, decided_at: float, *, skipped: bool) -> None:
        """``draft`` was committed: what it spared the authority, if a named speculator proposed it.  The tool time
        it ran before the authority's decision came (at ``decided_at``), and, ``skipped`` (a macro commit), the
        decision itself."""
        if draft.speculator is None or draft.started is None or draft.finished is None:
            return
        until = draft.finished if skipped else min(draft.finished, decided_at)
        self.observe_saving(draft.speculator, until - draft.started)
        if skipped:
            self.observe_skipped(draft.speculator, 1)

    # -- verified macro commits ----------------------------------------------------------------------

    def verifying(self) -> bool:
        """Whether a fired macro's chain may be sent to the authority for verification now."""
        return not self.verifications.paused

    def observe_verification(self, seconds: float, accepted: int) -> None:
        """A chain verification took ``seconds`` on the critical path and ``accepted`` of its steps committed
        without a decision; pause macro commits once verifications cost more than the decisions they spared."""
        account = self.verifications
        account.count += 1
        account.spent_s += max(0.0, seconds)
        account.accepted += accepted
        saved = account.accepted * self.decision_s()
        if not account.paused and account.count >= self.config.min_verifications and account.spent_s > saved:
            account.paused, account.paused_at_step = True, self.steps
            account.reason = (f"{account.count} chain verifications took {account.spent_s:.3f}s and spared "
                              f"{account.accepted} decisions ({saved:.3f}s at {self.decision_s():.3f}s each)")

    def decision_s(self) -> float:
        """The mean authority decision of a tool call observed (0 before any)."""
        return statistics.fmean(self.calls_decided) if self.calls_decided else 0.0

    # -- the verdict ------------------------------------------------------------------------------

    def baseline_s(self) -> float:
        """The mean authority decision without speculation (0 before any was seen)."""
        return statistics.fmean(self.clean) if self.clean else 0.0

    def _matched(self, account: _Account) -> tuple[list[tuple[float, float]], list[float]]:
        """The speculator's overlapped decisions as (excess over their stratum's baseline mean, share), and the
        baseline decisions of those strata as deviations from their own stratum's mean."""
        means = {k: statistics.fmean(v) for k, v in self.clean_by_stratum.items() if v}
        excess = [(s - means[k], share) for s, share, k in account.overlapped if k in means]
        strata = {k for _, _, k in account.overlapped if k in means}
        deviations = [s - means[k] for k in sorted(strata) for s in self.clean_by_stratum[k]]
        return excess, deviations

    def cost(self, name: str) -> tuple[float, float]:
        """``name``'s cost to the authority so far: (estimate, lower confidence bound), in seconds."""
        account = self.accounts[name]
        excess, clean = self._matched(account)
        if not excess:
            return account.wait_s, account.wait_s
        mean_share = statistics.fmean(share for _, share in excess)
        delta = statistics.fmean(e for e, _ in excess)
        spread = _variance([e for e, _ in excess]) / len(excess) + _variance(clean) / len(clean)
        t = _t_quantile(min(len(excess), len(clean)) - 1, self.config.confidence)
        per_share, low_per_share = delta / mean_share, (delta - t * math.sqrt(spread)) / mean_share
        return (max(0.0, per_share) * account.share_total + account.wait_s,
                max(0.0, low_per_share) * account.share_total + account.wait_s)

    def _judge(self) -> None:
        config = self.config
        for name, account in self.accounts.items():
            if account.paused:
                if config.reprobe_after is not None and self.steps - (account.paused_at_step or 0) >= config.reprobe_after:
                    account.paused, account.overlapped = False, []  # re-probe: fresh evidence decides again
                continue
            excess, clean = self._matched(account)
            if len(excess) < config.min_overlapped or len(clean) < config.min_clean:
                continue
            estimate, low = self.cost(name)
            if config.pauses and low - account.saving_s > config.margin * self.baseline_s() * self.steps:
                account.paused, account.paused_at_step = True, self.steps
                account.reason = (f"costs the authority {estimate:.3f}s (at least {low:.3f}s) and saved "
                                  f"{account.saving_s:.3f}s over {account.decisions} overlapped decisions")

    def report(self) -> dict[str, dict[str, Any]]:
        """Per speculator: ``cost_s``, ``saving_s``, ``decisions`` (it overlapped), ``paused``,
        ``paused_at_step``, ``reason``; and the baseline it was judged against."""
        out: dict[str, dict[str, Any]] = {}
        for name, account in self.accounts.items():
            estimate, low = self.cost(name)
            out[name] = {"cost_s": round(estimate, 4), "cost_low_s": round(low, 4),
                         "saving_s": round(account.saving_s, 4), "decisions": account.decisions,
                         "paused": account.paused, "paused_at_step": account.paused_at_step, "reason": account.reason,
                         "baseline_decision_s": round(self.baseline_s(), 4), "baseline_decisions": len(self.clean)}
        checked = self.verifications
        if checked.count:
            out[VERIFICATION] = {"cost_s": round(checked.spent_s, 4), "saving_s": round(checked.accepted * self.decision_s(), 4),
                                 "decisions": checked.count, "accepted_steps": checked.accepted,
                                 "paused": checked.paused, "paused_at_step": checked.paused_at_step,
                                 "reason": checked.reason}
        return out


_T_TABLE = {0.95: [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812],
            0.99: [31.82, 6.965, 4.541, 3.747, 3.365, 3.143, 2.998, 2.896, 2.821, 2.764]}
_T_LIMIT = {0.95: 1.645, 0.99: 2.326}


def _t_quantile(df: int, confidence: float) -> float:
    """Student's t one-sided quantile for ``df`` degrees of freedom (conservative above 10: the df-10 value
    down to 20, the normal's beyond)."""
    if confidence not in _T_TABLE:
        raise ValueError(f"confidence must be one of {sorted(_T_TABLE)}")
    table = _T_TABLE[confidence]
    if df < 1:
        return math.inf
    return table[df - 1] if df <= len(table) else table[-1] if df <= 20 else _T_LIMIT[confidence]


def _variance(values: Sequence[float]) -> float:
    return statistics.variance(values) if len(values) > 1 else 0.0


@dataclass(frozen=True)
class Proposal:
    """A speculator's decision and which speculator made it (None: an unnamed policy)."""

    name: str | None
    decision: Decision


@runtime_checkable
class MayAbstain(Protocol):
    """A speculator that can say it has no guess (the learned one, where no rule or n-gram applies)."""

    async def guess(self, history: History) -> Decision | None:
        """Its decision, or None where it has no guess; ``Decision(call=None)`` predicts the end."""
        ...


def abstains(decision: Decision | None) -> bool:
    """No guess: none given, or an answer that is neither a call nor an end (text, an unusable call).  A bare
    ``Decision(call=None)`` (or one with ``final``) is a guess too: "the task is done"."""
    return decision is None or (decision.call is None and decision.final is None
                                and (decision.invalid is not None or decision.text is not None))


@dataclass
class MemberCounts:
    """What one panel member answered: calls, predicted ends, abstentions; and how its ends fared
    (:meth:`SpeculatorPanel.score_ends`)."""

    calls: int = 0
    ends: int = 0
    abstained: int = 0
    ends_right: int = 0
    ends_wrong: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counts as a run's records hold them (``execution.metrics.speculators``)."""
        return asdict(self)


class SpeculatorPanel:
    """Several speculators as one: each asked in turn (skipping those the governor paused) until one guesses.
    A guess is a call or a predicted end ("the task is done": it ends the draft chain, and is right when the
    authority ends there, wrong otherwise); only an abstention (no guess, see :func:`abstains`) passes the turn
    to the next.  With every speculator paused or abstaining, the answer is "no call"."""

    def __init__(self, members: Sequence[tuple[str, Policy]], governor: Governor | None = None) -> None:
        self.members = list(members)
        self.governor = governor
        self.counts = {name: MemberCounts() for name, _ in self.members}
        self._ends: list[tuple[str, list[Any]]] = []
        """Each predicted end: who made it and the calls it predicts the task ends after (committed + drafts)."""

    async def propose(self, history: History) -> Proposal:
        for name, policy in self.members:
            if self.governor is not None and not self.governor.active(name):
                continue
            with self.governor.speculating(name) if self.governor is not None else nullcontext():
                decision = await policy.guess(history) if isinstance(policy, MayAbstain) else await policy.decide(history)
            counts = self.counts[name]
            if decision is None or abstains(decision):
                counts.abstained += 1
                continue
            if decision.call is None:
                counts.ends += 1
                self._ends.append((name, [call for call, _ in history]))
            else:
                counts.calls += 1
            return Proposal(name, decision)
        return Proposal(None, Decision(call=None))

    async def decide(self, history: History) -> Decision:
        return (await self.propose(history)).decision

    def score_ends(self, committed: Sequence[Any]) -> dict[str, MemberCounts]:
        """Score the predicted ends against the task's ``committed`` calls once it is over: an end is right when
        the task ended exactly after the calls it was predicted after, wrong otherwise (the authority went on, or
        the drafts it stood on were not what the authority did).  Returns :attr:`counts`; scores each end once."""
        for name, before in self._ends:
            right = list(committed) == before
            self.counts[name].ends_right += int(right)
            self.counts[name].ends_wrong += int(not right)
        self._ends = []
        return self.counts


async def propose(speculator: Policy, history: History) -> Proposal:
    """The speculator's next guess, named by who made it when ``speculator`` is a :class:`SpeculatorPanel`."""
    if isinstance(speculator, SpeculatorPanel):
        return await speculator.propose(history)
    return Proposal(None, await speculator.decide(history))


def panel_counts(speculator: Policy | None, committed: Sequence[Any]) -> dict[str, dict[str, int]] | None:
    """Once a task is over, its panel's counts per member with the predicted ends scored against the task's
    ``committed`` calls (:meth:`SpeculatorPanel.score_ends`); None unless ``speculator`` is a panel of two or more
    (a single speculator, governed or not, has nobody to share its turns with)."""
    if not isinstance(speculator, SpeculatorPanel) or len(speculator.members) < 2:
        return None
    return {name: counts.as_dict() for name, counts in speculator.score_ends(committed).items()}


@runtime_checkable
class LooksAhead(Protocol):
    """A speculator that runs read-only calls in forks before it guesses (the learned speculator's look-ahead)."""

    lookahead_calls: int
    lookahead_batches: int


def lookahead_counts(speculator: Policy | None) -> tuple[int, int]:
    """Look-ahead calls and batches ``speculator`` ran (summed over a panel's members; 0, 0 for others)."""
    members: list[object] = [p for _, p in speculator.members] if isinstance(speculator, SpeculatorPanel) else [speculator]
    calls = batches = 0
    for member in members:
        if isinstance(member, LooksAhead):
            calls, batches = calls + member.lookahead_calls, batches + member.lookahead_batches
    return calls, batches
