"""The governor's rule: told what each authority decision took and what each speculator was doing meanwhile, it
pauses a speculator (or verified macro commits) once the evidence says it costs more than it saves.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import anyio

from agentspec.runtime.draft import Draft
from agentspec.runtime.governor.evidence import (
    CLEAN,
    CLEAN_PER_STRATUM,
    OVERLAPPED,
    VERIFICATION,
    Account,
    GovernorConfig,
    Mark,
    Verifications,
    t_quantile,
    variance,
)


class Governor:
    """Measures each named speculator's cost and saving, and pauses the ones that cost more
    (:mod:`agentspec.runtime.governor`)."""

    def __init__(self, names: Sequence[str], config: GovernorConfig | None = None) -> None:
        self.config = config or GovernorConfig()
        self.accounts = {name: Account() for name in names}
        self.verifications = Verifications()
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

    def _matched(self, account: Account) -> tuple[list[tuple[float, float]], list[float]]:
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
        spread = variance([e for e, _ in excess]) / len(excess) + variance(clean) / len(clean)
        t = t_quantile(min(len(excess), len(clean)) - 1, self.config.confidence)
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
