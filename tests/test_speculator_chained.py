"""Chained look-ahead: a read-only call whose argument is a field of another look-ahead call's result (an id a
lookup by the task's phone number returned), run in the batch after it; its result decides the next call.  And
look-ahead at a draft chain's positions, in a fork of the draft's fork."""

from __future__ import annotations

import json
from collections.abc import Sequence

import anyio
from test_speculator_core import PATTERNS, fitted, lookahead_trajectories, obs
from toy_env import KVEnvironment

from agentspec.learned_speculator.lookahead import (
    ForkLookahead,
    Probe,
    ProbeRun,
    candidate_probes,
    chained_probes,
    run_probes,
)
from agentspec.learned_speculator.policy import LearnedSpeculator
from agentspec.learned_speculator.sources import Context, Source, TypedValues
from agentspec.learned_speculator.trajectories import Trajectory
from agentspec.normalize import Normalizer, patterns_from_table
from agentspec.runtime.policies.protocol import DraftedHistory
from agentspec.snapshot import InProcessBackend
from agentspec.types import Effect, Observation, ToolCall, ToolSpec

NORMALIZER = Normalizer(patterns_from_table(PATTERNS))
TOOLS = [
    ToolSpec(name="lookup", effect=Effect.READ_ONLY,
             parameters={"type": "object", "properties": {"phone_number": {"type": "string"}}, "required": ["phone_number"]}),
    ToolSpec(name="status", effect=Effect.READ_ONLY,
             parameters={"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
    ToolSpec(name="unlock", effect=Effect.MUTATING,
             parameters={"type": "object", "properties": {"account": {"type": "string"}}, "required": ["account"]}),
]
LOOKUP = 'lookup{"phone_number":"<phone_number#0>"}'
STATUS = 'status{"id":"<lookup{\\"phone_number\\":\\"<phone_number#0>\\"}:account_id>"}'


class Accounts:
    """A scripted read-only service: lookups by phone, statuses by account (records every batch it ran)."""

    def __init__(self, locked: bool) -> None:
        self.locked, self.batches = locked, []

    async def __call__(self, calls: Sequence[ToolCall]) -> list[Observation | None]:
        self.batches.append([c.name for c in calls])
        return [self.answer(call) for call in calls]

    def answer(self, call: ToolCall) -> Observation:
        if call.name == "lookup":
            return obs("lookup", json.dumps({"account_id": "A5001", "phone_number": call.arguments["phone_number"]}))
        assert call.arguments == {"id": "A5001"}  # the id the lookup returned, not a constant
        return obs("status", json.dumps({"locked": self.locked}))


def probes():
    typed = TypedValues(NORMALIZER.patterns)
    text = typed.find("Customer at 555-010-1001 is locked out.")
    calls = [ToolCall(name="unlock", arguments={"account": "A5001"})]
    first = candidate_probes(TOOLS, NORMALIZER, [text], calls)
    sample = {LOOKUP: json.dumps({"account_id": "A5001", "phone_number": "555-010-1001"})}
    return first, chained_probes(TOOLS, NORMALIZER, first, [sample], calls)


def test_a_chained_probe_takes_its_argument_from_the_first_probes_result() -> None:
    first, chained = probes()
    assert [p.key for p in first] == [LOOKUP]  # no bare status probe: nothing in the text is an account
    assert [p.key for p in chained] == [STATUS]
    assert chained[0].reads == (LOOKUP,)


def test_chained_probes_run_a_level_later_and_decide_the_next_call() -> None:
    first, chained = probes()
    text = "Customer at 555-010-1001 is locked out."
    context = Context(text, [], {}, TypedValues(NORMALIZER.patterns))
    service = Accounts(locked=True)
    seen = anyio.run(lambda: run_probes([*chained, *first], context, service))
    assert service.batches == [["lookup"], ["status"]]
    assert json.loads(seen[STATUS]) == {"locked": True}

    # Fitted where locked accounts were unlocked and others not: the chained probe's result decides it, and
    # the probe it reads from is kept with it.
    trajectories = []
    for i in range(6):
        locked = i % 2 == 0
        phone, account = f"555-010-{1000 + i}", f"A{5000 + i}"
        looked = {LOOKUP: json.dumps({"account_id": account}), STATUS: json.dumps({"locked": locked})}
        steps = ((ToolCall(name="unlock", arguments={"account": account}), obs("unlock", "ok")),) if locked else ()
        after = {**looked, STATUS: json.dumps({"locked": False})}
        trajectories.append(Trajectory(f"t{i}", f"Customer at {phone} is locked out.", steps, "synthetic",
                                       (looked, after) if locked else (looked,)))
    model = fitted(trajectories, [*first, *chained])
    assert {p.key for p in model.probes} == {LOOKUP, STATUS}
    locked_seen = {LOOKUP: json.dumps({"account_id": "A5009"}), STATUS: json.dumps({"locked": True})}
    free_seen = {**locked_seen, STATUS: json.dumps({"locked": False})}
    guess = model.predict("Customer at 555-010-1009 is locked out.", [], locked_seen)[0]
    assert guess.call == ToolCall(name="unlock", arguments={"account": "A5009"}) and guess.strict
    assert model.predict("Customer at 555-010-1009 is locked out.", [], free_seen)[0].call is None


def test_at_a_draft_chain_position_the_speculator_looks_ahead_in_a_fork_of_the_drafts_fork() -> None:
    async def scenario() -> None:
        backend = InProcessBackend(KVEnvironment({"mode": 1}))
        model = fitted(lookahead_trajectories(), [Probe(name="get", arguments={"key": Source(kind="const", value="mode")})])
        look = ForkLookahead(backend)
        speculator = LearnedSpeculator(model, "same text for every task", lookahead=look)
        put = ToolCall(name="put", arguments={"key": "x", "value": 1})
        # The executor's draft fork (mode 1, `put x` drafted in it); live has moved to mode 0 since.
        draft = await backend.fork(await backend.snapshot())
        drafts = [(put, await draft.execute(put))]
        await backend.execute(ToolCall(name="put", arguments={"key": "mode", "value": 0}))
        on_live = await speculator.decide(drafts)
        assert on_live.call is None  # the probe saw live's mode=0: nothing to fix
        in_draft = await speculator.decide(DraftedHistory([], drafts, draft))
        # The probe ran in a fork of the draft's fork (mode=1).
        assert in_draft.call == ToolCall(name="reset", arguments={"key": "mode"})
        assert look.calls == 2
        assert (await draft.execute(ToolCall(name="get", arguments={"key": "mode"}))).content == "mode=1"
        assert backend.live.state["data"] == {"mode": 0}  # the probes touched neither live nor the draft's fork
        await backend.discard(draft)
        # A fork that is gone: no look-ahead, the guess from the history alone (no error).
        gone = await speculator.decide(DraftedHistory([], drafts, draft))
        assert look.calls == 2 and gone.call == model.predict("same text for every task", drafts, None)[0].call

    anyio.run(scenario)


class Moving(Accounts):
    """Accounts whose lookup returns ``account``, which the test changes between predictions (asserts nothing
    about the status call's id: a status run ahead may carry the previous account)."""

    def __init__(self, account: str) -> None:
        super().__init__(locked=True)
        self.account, self.status_ids = account, []

    def answer(self, call: ToolCall) -> Observation:
        if call.name == "lookup":
            return obs("lookup", json.dumps({"account_id": self.account}))
        self.status_ids.append(call.arguments["id"])
        return obs("status", json.dumps({"locked": call.arguments["id"] == self.account}))


def test_earlier_results_run_a_chained_probe_in_the_first_batch_and_change_nothing_it_returns() -> None:
    first, chained = probes()
    context = Context("Customer at 555-010-1001 is locked out.", [], {}, TypedValues(NORMALIZER.patterns))
    service = Moving("A5001")
    plain = anyio.run(lambda: run_probes([*first, *chained], context, service))
    assert service.batches == [["lookup"], ["status"]]

    # The lookup still returns A5001: the status call made from the earlier results is the fresh one, one batch.
    service.batches = []
    budget = ProbeRun()
    again = anyio.run(lambda: run_probes([*first, *chained], context, service, budget, plain))
    assert service.batches == [["lookup", "status"]] and budget.batches == 1 and budget.early == 1
    assert again == plain

    # The lookup now returns another account: the status run ahead had the old id, so it runs again with the
    # new one, and what comes back is exactly what a look-ahead without earlier results gives.
    service.account, service.batches, service.status_ids = "A5002", [], []
    budget = ProbeRun()
    moved = anyio.run(lambda: run_probes([*first, *chained], context, service, budget, plain))
    assert service.batches == [["lookup", "status"], ["status"]] and budget.batches == 2 and budget.early == 0
    assert service.status_ids == ["A5001", "A5002"]
    fresh = anyio.run(lambda: run_probes([*first, *chained], context, Moving("A5002")))
    assert moved == fresh and json.loads(moved[STATUS]) == {"locked": True}


def test_the_cap_counts_the_calls_run_ahead() -> None:
    first, chained = probes()
    context = Context("Customer at 555-010-1001 is locked out.", [], {}, TypedValues(NORMALIZER.patterns))
    earlier = anyio.run(lambda: run_probes([*first, *chained], context, Moving("A5001")))
    service, budget = Moving("A5001"), ProbeRun(cap=1)
    seen = anyio.run(lambda: run_probes([*first, *chained], context, service, budget, earlier))
    assert service.batches == [["lookup"]] and budget.calls == 1 and budget.capped
    assert set(seen) == {LOOKUP}
