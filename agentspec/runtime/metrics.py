"""One task's books: the counters the runtime changes only through ``observe_*`` calls, and its timeline.

Kept apart from the summaries (:mod:`agentspec.runtime.summary`): the loop and its parts write these per task;
a mode's figures are computed from them afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Event:
    """One interval on a task's timeline: which lane, when, and what."""

    lane: str  # "authority" | "speculator" | "tool" | "commit"
    start: float
    end: float
    label: str
    kind: str = ""


@dataclass
class ExecutionMetrics:
    """What one task's execution cost and saved."""

    wall_s: float = 0.0
    authority_wait_s: float = 0.0
    tool_wait_s: float = 0.0
    speculator_busy_s: float = 0.0
    draft_wait_s: float = 0.0
    """Time the authority waited for the speculator's guess before deciding (``draft_first``, recording runs)."""
    authority_calls: int = 0
    authority_skipped: int = 0
    speculator_calls: int = 0
    commits_sa: int = 0
    commits_macro: int = 0
    macro_firings: int = 0
    reused_read_only: int = 0
    live_executions: int = 0
    drafts_discarded: int = 0
    wasted_tool_calls: int = 0
    wasted_tokens: int = 0
    speculative_tool_calls: int = 0
    snapshot_failures: int = 0
    macro_checks: int = 0
    macro_disagreements: int = 0
    macro_commit: str | None = None
    """SMC: ``verified``, ``trusted``, or ``trusted (verification unavailable: <reason>)`` (None in other modes)."""
    chains_verified: int = 0
    """SMC verified: fired macros' chains the authority verified before committing."""
    chain_steps_offered: int = 0
    """Steps in those chains."""
    chain_steps_accepted: int = 0
    """Of them, the steps the authority made itself (committed)."""
    chain_steps_rejected: int = 0
    """Steps the authority refused: at most one per chain (the steps after it were not judged; they stay drafts)."""
    verify_s: float = 0.0
    """Time the verifications took (on the critical path: the authority's next decision waits for them)."""
    probes: int = 0
    probe_hits: int = 0
    probe_name_hits: int = 0
    probe_tokens: int = 0
    probe_prompt_tokens: int = 0
    probe_cached_tokens: int = 0
    """Prompt tokens of the probes the endpoint served from its prefix cache (when it reports them)."""
    gated_out: int = 0
    invalid_probes: int = 0
    early_dispatches: int = 0
    commits_spork: int = 0
    time_overlapped_s: float = 0.0
    authority_reported_calls: int = 0
    """Authority decisions whose endpoint reported its decoding (``agentspec serve --decoder toolspec``)."""
    authority_forwards: int = 0
    """Target-model forwards those decisions took."""
    authority_hint_tokens: int = 0
    """Of their tokens, those accepted from the speculator's predicted call (draft source ``hint.speculator``)."""
    late_hints: int = 0
    """Speculator predictions of the next call handed to the authority's request while it was already running."""
    late_hints_delivered: int = 0
    """Of those, the ones its endpoint took (``agentspec serve --decoder toolspec``; others take none)."""
    alternative_tool_calls: int = 0
    """Speculated calls run in forks as the speculator's further guesses for a position (``--spec-width`` > 1)."""
    lookahead_calls: int = 0
    """Read-only calls a learned speculator ran in forks before guessing (never on live state)."""
    lookahead_batches: int = 0
    """The batches they ran in: each takes one tool time on the clock (its calls are independent reads)."""
    hits_by_rank: list[int] = field(default_factory=list)
    """[r]: drafts committed as the authority's call that were the speculator's guess of rank r (0: its head
    guess, 1 and more: its alternatives, ``--spec-width``)."""
    predictions_by_depth: list[int] = field(default_factory=list)
    """[d-1]: speculator drafts standing at chain depth d when the authority decided a step."""
    hits_by_depth: list[int] = field(default_factory=list)
    """[d-1]: of those, the drafts equal to the call committed d-1 steps later (the speculator's hit rate by depth)."""
    name_hits_by_depth: list[int] = field(default_factory=list)
    """[d-1]: of those, the drafts naming the same tool as the call committed d-1 steps later."""
    observation_mismatches: int = 0
    """A recorded agent (``--agent replay``): calls whose answer here differs from the recording's."""
    speculators: dict[str, dict[str, int]] | None = None
    """A panel of two or more speculators (``--speculator-model`` given again): per member its ``calls``,
    ``ends`` (predicted "the task is done"), ``abstained``, and of its ends ``ends_right``/``ends_wrong``
    (:func:`~agentspec.runtime.governor.panel.panel_counts`); None, and left out of :meth:`as_dict`, otherwise."""

    # -- observations: the only way the runtime changes these figures (as vLLM's spec-decode stats) --------------

    def observe_commit_mode(self, mode: str) -> None:
        """SMC's macro commit for this task, as :func:`~agentspec.runtime.chain_verification.commit_mode` resolved it."""
        self.macro_commit = mode

    def observe_mismatches(self, count: int) -> None:
        """A recorded agent's episode: ``count`` calls answered otherwise than in its recording."""
        self.observation_mismatches = count

    def observe_wall(self, seconds: float) -> None:
        """The task's wall time, from the start of the run to its end."""
        self.wall_s = seconds

    def observe_draft_wait(self, seconds: float) -> None:
        """The authority waited ``seconds`` for the speculator's guess before deciding."""
        self.draft_wait_s += seconds

    def observe_decision(self, seconds: float, forwards: int | None, hint_tokens: int | None) -> None:
        """One authority decision took ``seconds``; ``forwards`` is None unless its endpoint reported its decoding."""
        self.authority_calls += 1
        self.authority_wait_s += seconds
        if forwards is not None:
            self.authority_reported_calls += 1
            self.authority_forwards += forwards
            self.authority_hint_tokens += hint_tokens or 0

    def observe_tool_wait(self, seconds: float) -> None:
        """The loop waited ``seconds`` for a tool (a draft's or dispatch's, still running when confirmed)."""
        self.tool_wait_s += seconds

    def observe_live(self, seconds: float) -> None:
        """A call ran on live state in ``seconds``."""
        self.tool_wait_s += seconds
        self.live_executions += 1

    def observe_sa_commit(self, rank: int) -> None:
        """A draft was committed as the authority's call; ``rank`` 0: the head guess, more: an alternative."""
        self.commits_sa += 1
        self.hit_at_rank(rank)

    def observe_reuse(self) -> None:
        """A read-only call was answered from a finished draft."""
        self.reused_read_only += 1

    def observe_speculator(self, seconds: float) -> None:
        """The speculator answered one request in ``seconds``."""
        self.speculator_calls += 1
        self.speculator_busy_s += seconds

    def observe_speculative_run(self, *, alternative: bool) -> None:
        """A speculated call started in a fork (``alternative``: a further guess for a position)."""
        self.speculative_tool_calls += 1
        self.alternative_tool_calls += int(alternative)

    def observe_snapshot_failure(self) -> None:
        self.snapshot_failures += 1

    def observe_discarded(self, tokens: int, *, ran: bool) -> None:
        """A draft was thrown away: its ``tokens`` were decoded for nothing, and its tool call if it ``ran``."""
        self.drafts_discarded += 1
        self.wasted_tokens += tokens
        self.wasted_tool_calls += int(ran)

    def observe_late_hint(self) -> None:
        """A predicted call was handed to the authority's running request."""
        self.late_hints += 1

    def observe_hint_delivered(self, taken: bool) -> None:
        self.late_hints_delivered += int(taken)

    def observe_probe(self, tokens: int, prompt_tokens: int, cached_tokens: int) -> None:
        """SPORK probed the authority's partial output once."""
        self.probes += 1
        self.probe_tokens += tokens
        self.probe_prompt_tokens += prompt_tokens
        self.probe_cached_tokens += cached_tokens

    def observe_invalid_probe(self) -> None:
        self.invalid_probes += 1

    def observe_gated_out(self) -> None:
        self.gated_out += 1

    def observe_early_dispatch(self) -> None:
        self.early_dispatches += 1

    def observe_probe_outcome(self, *, hit: bool, name_hit: bool) -> None:
        """A probe's call against the authority's: equal, or naming the same tool."""
        self.probe_hits += int(hit)
        self.probe_name_hits += int(name_hit)

    def observe_spork_commit(self, overlapped_s: float) -> None:
        """An early dispatch was committed; its tool ran ``overlapped_s`` while the authority decoded."""
        self.time_overlapped_s += overlapped_s
        self.commits_spork += 1

    def observe_macro_firing(self, committed: int) -> None:
        """A macro committed ``committed`` drafts, each an authority decision skipped."""
        self.commits_macro += committed
        self.authority_skipped += committed
        self.macro_firings += 1

    def observe_macro_check(self, checks: int, *, disagreed: bool) -> None:
        """The authority was asked ``checks`` times about macro-committed steps; ``disagreed``: it would not have
        made one of them."""
        self.macro_checks += checks
        self.macro_disagreements += int(disagreed)

    def observe_chain_verified(self, steps: int, accepted: int, *, rejected: bool, seconds: float) -> None:
        """The authority verified a fired macro's chain of ``steps`` and accepted its first ``accepted``."""
        self.chains_verified += 1
        self.chain_steps_offered += steps
        self.chain_steps_accepted += accepted
        self.chain_steps_rejected += int(rejected)
        self.verify_s += seconds

    def score_predictions(self, standing: Sequence[tuple[int, Sequence[Any]]], committed: Sequence[Any]) -> None:
        """Count each standing chain ``(step it was standing at, drafted calls)`` against the committed calls."""
        for base, calls in standing:
            for depth, call in enumerate(calls, 1):
                step = base + depth - 1
                if step >= len(committed):
                    break
                _bump(self.predictions_by_depth, depth)
                _grow(self.hits_by_depth, depth)
                _grow(self.name_hits_by_depth, depth)
                self.hits_by_depth[depth - 1] += int(committed[step] == call)
                self.name_hits_by_depth[depth - 1] += int(committed[step].name == call.name)

    def observe_lookahead(self, calls: int, batches: int) -> None:
        """The task's speculators ran ``calls`` look-ahead calls in ``batches`` batches."""
        self.lookahead_calls, self.lookahead_batches = calls, batches

    def observe_panel(self, counts: dict[str, dict[str, int]] | None) -> None:
        """The task's panel counts per member, its ends scored (None: the task had no panel of two or more)."""
        self.speculators = counts

    def hit_at_rank(self, rank: int) -> None:
        """Count a committed draft that was the speculator's guess of ``rank`` (0: the head guess)."""
        _bump(self.hits_by_rank, rank + 1)

    def as_dict(self) -> dict[str, Any]:
        figures = asdict(self)
        if figures["speculators"] is None:  # a run with one speculator keeps the records it always had
            del figures["speculators"]
        return figures


def _grow(counts: list[int], depth: int) -> None:
    counts.extend([0] * (depth - len(counts)))


def _bump(counts: list[int], depth: int) -> None:
    _grow(counts, depth)
    counts[depth - 1] += 1


@dataclass
class Timeline:
    events: list[Event] = field(default_factory=list)

    def add(self, lane: str, start: float, end: float, label: str, kind: str = "") -> None:
        self.events.append(Event(lane, start, end, label, kind))
