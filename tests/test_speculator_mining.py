"""The learned speculator while mining and its look-ahead cap: as labeller it looks ahead in a fork of the mined
trajectory's state at that step (never in a replay's live state, which is the end of the trajectory), counted; a
cap bounds the look-ahead calls of one prediction wherever the speculator is used."""

from __future__ import annotations

import json

import anyio
import pytest
from test_speculator_chained import LOOKUP, NORMALIZER, STATUS, Accounts, probes
from test_speculator_core import fitted, lookahead_trajectories, obs
from toy_env import KVEnvironment

from agentspec.cli import main
from agentspec.errors import SnapshotError
from agentspec.learned_speculator.artifact import Artifact, load
from agentspec.learned_speculator.lookahead import ForkLookahead, Probe, ProbeRun, run_probes
from agentspec.learned_speculator.policy import LearnedSpeculator
from agentspec.learned_speculator.sources import Context, Source, TypedValues
from agentspec.mining.labelling import ForkOnlyLookahead, ReplaySandboxes, sample_continuations
from agentspec.snapshot import InProcessBackend
from agentspec.trajectories import MinedTrajectory
from agentspec.types import ToolCall

TEXT = "same text for every task"
PUT = ToolCall(name="put", arguments={"key": "x", "value": 1})
RESET = ToolCall(name="reset", arguments={"key": "mode"})
GET_MODE = Probe(name="get", arguments={"key": Source(kind="const", value="mode")})


def mined(broken: bool, number: int) -> MinedTrajectory:
    """A task that starts in mode 1 (broken: the agent resets it after ``put``) or mode 0 (done after ``put``)."""
    steps = [(PUT, obs("put", "ok"))] + ([(RESET, obs("reset", "ok"))] if broken else [])
    return MinedTrajectory(f"t{number}", "synthetic", tuple(steps))


def test_the_learned_labeller_looks_ahead_in_the_samples_fork_and_never_on_live() -> None:
    model = fitted(lookahead_trajectories(), [GET_MODE])
    trajectories = [mined(i % 2 == 0, i) for i in range(4)]
    backends: dict[str, InProcessBackend] = {}

    def backend(t: MinedTrajectory) -> InProcessBackend:
        return backends.setdefault(t.task_id, InProcessBackend(KVEnvironment({"mode": 1 if t.task_id in ("t0", "t2") else 0})))

    async def label() -> tuple[dict, int]:
        async with ReplaySandboxes(backend) as sandboxes:
            states = [(i, 0) for i in range(len(trajectories))]  # each task right after its `put`
            found = await sample_continuations(trajectories, states, lambda t, s: LearnedSpeculator(model, TEXT),
                                               samples=1, depth=3, sandboxes=sandboxes)
            # The replays' live states are each trajectory's end (mode 0 everywhere): a look-ahead there would
            # guess the end for the broken tasks too.  Only the trajectories' own calls ever reached them.
            for t in trajectories:
                live = backends[t.task_id].live.state
                assert live["data"]["mode"] == 0
                assert live["journal"] == ["put x 1"] + (["reset mode"] if len(t.steps) == 2 else [])
            return found, sandboxes.lookahead_calls

    found, calls = anyio.run(label)
    # Broken tasks: the probe saw mode 1 in the sample's fork, so `reset`; then, in a fork of the draft's fork
    # (mode 0 there), the end.  Fine tasks: the end at once.  The history alone is the same for both.
    assert [found[(i, 0)][0] for i in range(4)] == [(RESET,), (), (RESET,), ()]
    assert calls == 2 + 1 + 2 + 1  # one look-ahead call per guess, each counted


def test_a_mining_lookahead_without_a_fork_raises_and_the_speculator_guesses_from_history() -> None:
    async def scenario() -> None:
        backend = InProcessBackend(KVEnvironment({"mode": 1}))
        look = ForkOnlyLookahead(backend)
        with pytest.raises(SnapshotError, match="only in a sample's fork"):
            await look([ToolCall(name="get", arguments={"key": "mode"})])
        speculator = LearnedSpeculator(fitted(lookahead_trajectories(), [GET_MODE]), TEXT, lookahead=look)
        await speculator.decide([(PUT, obs("put", "ok"))])  # a committed history: live, refused, no error
        assert look.calls == 0 and speculator.lookahead_calls == 0

    anyio.run(scenario)


# --------------------------------------------------------------------------- the look-ahead cap


def test_the_cap_bounds_a_predictions_lookahead_calls_in_the_fits_order() -> None:
    first, chained = probes()
    context = Context("Customer at 555-010-1001 is locked out.", [], {}, TypedValues(NORMALIZER.patterns))

    def run(cap: int | None) -> tuple[dict[str, str], ProbeRun, list[list[str]]]:
        service, budget = Accounts(locked=True), ProbeRun(cap=cap)
        seen = anyio.run(lambda: run_probes([*first, *chained], context, service, budget))
        return seen, budget, service.batches

    seen, budget, batches = run(None)
    assert set(seen) == {LOOKUP, STATUS} and budget.calls == 2 and not budget.capped and batches == [["lookup"], ["status"]]
    seen, budget, batches = run(1)  # the lookup only: the chained status has no input then
    assert set(seen) == {LOOKUP} and budget.calls == 1 and budget.capped and batches == [["lookup"]]
    seen, budget, batches = run(0)
    assert seen == {} and budget.calls == 0 and budget.capped and batches == []


def test_the_speculator_obeys_the_files_cap_and_counts_what_it_cut(tmp_path) -> None:
    model = fitted(lookahead_trajectories(), [GET_MODE])
    path = tmp_path / "spec.json"
    Artifact(model=model.model_copy(update={"lookahead_cap": 0})).save(path)
    capped_model = load(path).model
    assert capped_model.lookahead_cap == 0  # the cap travels in the file

    async def decide(speculator: LearnedSpeculator) -> ToolCall | None:
        backend = InProcessBackend(KVEnvironment({"mode": 1}))
        speculator.look_through(ForkLookahead(backend))
        return (await speculator.decide([(PUT, obs("put", "ok"))])).call

    free = LearnedSpeculator(model, TEXT)
    assert anyio.run(decide, free) == RESET and free.lookahead_calls == 1 and free.capped == 0
    capped = LearnedSpeculator(capped_model, TEXT)
    anyio.run(decide, capped)  # no look-ahead: a guess from the history alone
    assert capped.lookahead_calls == 0 and capped.capped == 1
    lifted = LearnedSpeculator(capped_model, TEXT, lookahead_cap=5)  # the option overrides the file
    assert anyio.run(decide, lifted) == RESET and lifted.lookahead_calls == 1


def test_speculator_score_takes_a_lookahead_cap_and_reports_it(bench, tau2_dir, tmp_path, capsys) -> None:
    from agentspec.learned_speculator.command import fit_bench

    artifact = anyio.run(lambda: fit_bench(bench, bench.tasks("train", limit=6), split="train"))
    path = tmp_path / "spec.json"
    artifact.save(path)
    assert artifact.model.probes and artifact.model.lookahead_cap is None

    def score(*extra: str) -> dict:
        argv = ["speculator", "score", "--bench", "tau2-telecom", "--split", "test", "--limit", "2", "--lookahead",
                "--speculator", str(path), "--data-dir", str(tau2_dir), *extra]
        assert main(argv) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    free, capped = score(), score("--lookahead-cap", "2")
    assert free["lookahead_cap"] is None and free["lookahead_capped"] == 0.0 and free["lookahead_calls_per_step"] > 2
    assert capped["lookahead_cap"] == 2 and capped["lookahead_calls_per_step"] <= 2 and capped["lookahead_capped"] > 0
