"""The governor: a speculator that slows the authority more than it saves is paused, and the run says so; a
cheap one is left alone.  Measured on real HTTP (the scripted OpenAI-compatible endpoint), side by side with
sequential in the same run."""

from __future__ import annotations

import json
import threading
import time

from scripted_openai_server import ScriptedOpenAIServer

from agentspec.cli import main

AIRPLANE = "[service_issue]airplane_mode_on[PERSONA:None]"
CALLS = 30
"""Authority decisions per run: enough for the governor's evidence to be a small part of the run."""
TOGGLE = {"name": "toggle_airplane_mode", "arguments": {}}
WRONG = {"name": "check_status_bar", "arguments": {}}


class SharedMachine:
    """An authority and a speculator sharing one machine: the authority's work goes ``slowdown`` times slower
    for as long as a speculator request is in flight."""

    def __init__(self, *, speculator_s: float, slowdown: float, speculator_right: bool) -> None:
        self.speculator_s, self.slowdown, self.speculator_right = speculator_s, slowdown, speculator_right
        self.in_flight = 0
        self.slowed = 0
        """Authority decisions that ran slower for a speculator request in flight (for part of them at least)."""
        self.lock = threading.Lock()

    def __call__(self, request: dict) -> dict:
        step = sum(1 for m in request["messages"] if m["role"] == "tool")
        call = TOGGLE if step < CALLS else {"name": "done", "arguments": {}}
        if request["model"] == "speculator":
            with self.lock:
                self.in_flight += 1
            try:
                time.sleep(self.speculator_s)
            finally:
                with self.lock:
                    self.in_flight -= 1
            return {"tool_calls": [call if self.speculator_right else WRONG]}
        work, slowed = 0.02, False
        while work > 0:
            time.sleep(0.002)
            slowed = slowed or bool(self.in_flight)
            work -= 0.002 / (self.slowdown if self.in_flight else 1.0)
        with self.lock:
            self.slowed += slowed
        return {"tool_calls": [call]}


def run(capsys, machine: SharedMachine, tau2_dir, *flags: str) -> dict:
    with ScriptedOpenAIServer(machine, models=("authority", "speculator")) as srv:
        code = main(["run", "--json", "--bench", "tau2-telecom", "--task-ids", AIRPLANE, "--solo", "--mode", "sequential,sa",
                     "--agent-model", f"{srv.base_url}#authority", "--speculator-model", f"{srv.base_url}#speculator",
                     "--data-dir", str(tau2_dir), "--no-progress", *flags])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out.strip().splitlines()[-1])


def test_a_costly_speculator_is_paused_and_the_run_is_not_slower(tau2_dir, capsys):
    governed_machine = SharedMachine(speculator_s=0.05, slowdown=5.0, speculator_right=False)
    summary = run(capsys, governed_machine, tau2_dir)
    governor = summary["modes"]["sa"]["governor"]
    (name, verdict), = governor.items()
    assert name.endswith("#speculator")
    assert verdict["paused"] and verdict["paused_at_step"] <= 15, verdict
    assert verdict["cost_s"] > verdict["saving_s"] and "costs the authority" in verdict["reason"]
    assert "governor" not in summary["modes"]["sequential"]  # nothing to govern
    # Side by side with the same machine ungoverned.  What the machine counts is exact whatever the load: there
    # every sa decision ran beside a speculator request, governed only those before the pause did.  The clock
    # only has to agree on the order: absolute ratios move with the machine's load (governed 0.67x-0.83x, ungoverned
    # about 0.5x, on CI and here), so a margin on their ratio did not hold.
    ungoverned_machine = SharedMachine(speculator_s=0.05, slowdown=5.0, speculator_right=False)
    ungoverned = run(capsys, ungoverned_machine, tau2_dir, "--no-governor")
    assert "governor" not in ungoverned["modes"]["sa"]
    assert ungoverned_machine.slowed >= CALLS - 2, ungoverned_machine.slowed
    assert governed_machine.slowed <= verdict["paused_at_step"] + 2, (governed_machine.slowed, verdict)
    governed_sa, ungoverned_sa = summary["speedup_vs_sequential"]["sa"], ungoverned["speedup_vs_sequential"]["sa"]
    assert governed_sa > ungoverned_sa, (governed_sa, ungoverned_sa)


def test_a_cheap_useful_speculator_is_not_paused(tau2_dir, capsys, tmp_path):
    tools = tmp_path / "tools.json"  # every tool takes 50 ms (real models): a right guess hides that time
    tools.write_text(json.dumps({"name": "tools-50ms", "tool": {"fixed_s": 0.05}}), encoding="utf-8")
    machine = SharedMachine(speculator_s=0.002, slowdown=1.0, speculator_right=True)
    summary = run(capsys, machine, tau2_dir, "--latency-model", str(tools))
    sa = summary["modes"]["sa"]
    (verdict,) = sa["governor"].values()
    assert not verdict["paused"] and verdict["paused_at_step"] is None, verdict
    assert sa["commits_sa"] >= CALLS - 1  # it kept guessing, and right


# --- the governor alone, on trio's virtual clock -------------------------------------------------------------------


def virtual(fn):
    import anyio
    from trio.testing import MockClock

    return anyio.run(fn, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})


def test_two_speculators_the_first_that_answers_is_used_and_a_costly_one_is_paused():
    import anyio

    from agentspec.runtime.governor.evidence import GovernorConfig
    from agentspec.runtime.governor.panel import SpeculatorPanel
    from agentspec.runtime.governor.rule import Governor
    from agentspec.runtime.policies.protocol import Decision
    from agentspec.types import ToolCall

    class Abstains:  # no guess at all (the learned speculator where no rule applies)
        async def guess(self, history):
            return None

        async def decide(self, history):
            return Decision(call=None)

    class Slow:
        asked = 0

        async def decide(self, history):
            Slow.asked += 1
            await anyio.sleep(1.0)
            return Decision(call=ToolCall(name="guess"))

    governor = Governor(["learned", "model"], GovernorConfig(min_overlapped=3, min_clean=2, hold_every=1))
    panel = SpeculatorPanel([("learned", Abstains()), ("model", Slow())], governor)

    async def play():
        proposal = await panel.propose([])
        assert proposal.name == "model" and proposal.decision.call == ToolCall(name="guess")
        for _ in range(6):  # the authority decides in 0.2 s alone, in 1.0 s while the model runs
            async with anyio.create_task_group() as group:
                asked = Slow.asked
                if not governor.hold():
                    group.start_soon(panel.propose, [])
                    await anyio.sleep(0.01)  # the model is asked first (trio runs new tasks in any order)
                mark = governor.mark()
                await anyio.sleep(1.0 if Slow.asked > asked else 0.2)
                governor.observe_decision(mark)
        return await panel.propose([])

    last = virtual(play)
    report = governor.report()
    assert report["model"]["paused"] and report["model"]["paused_at_step"] == 5, report
    assert report["model"]["cost_s"] == 2.4, report  # 0.8 s slower on each of the 3 decisions it overlapped; saved nothing
    assert not report["learned"]["paused"] and report["learned"]["cost_s"] == 0.0
    assert last.name is None and last.decision.call is None  # paused: no longer asked
    assert Slow.asked == 4  # once, then in 3 decisions; not in the 2 held for a baseline, nor once paused


def test_a_predicted_end_is_a_guess_of_the_panel_not_an_abstention():
    """"The task is done" is the first member's guess: the next member is not asked, and the end is scored right
    when the task ended there, wrong when the authority went on.  Only no guess (or no usable answer) passes on."""
    import anyio

    from agentspec.runtime.governor.panel import SpeculatorPanel
    from agentspec.runtime.policies.protocol import Decision, DraftedHistory
    from agentspec.types import InvalidToolCall, ToolCall

    a, b = ToolCall(name="a"), ToolCall(name="b")

    class EndsAfterOne:
        async def guess(self, history):
            if not history:
                return None  # no guess at the start: the next member's turn
            return Decision(call=None)  # after one call: "the task is done"

        async def decide(self, history):
            return await self.guess(history) or Decision(call=None)

    class Model:
        asked = 0

        def __init__(self, answer):
            self.answer = answer

        async def decide(self, history):
            Model.asked += 1
            return self.answer

    async def play(second):
        panel = SpeculatorPanel([("learned", EndsAfterOne()), ("model", second)])
        start = await panel.propose([])
        after_a = await panel.propose(DraftedHistory([(a, None)], []))
        after_draft = await panel.propose(DraftedHistory([], [(a, None)]))
        return panel, start, after_a, after_draft

    panel, start, after_a, after_draft = anyio.run(play, Model(Decision(call=b)))
    assert (start.name, start.decision.call) == ("model", b)  # the learned one abstained at the start
    assert (after_a.name, after_a.decision.call) == ("learned", None)  # its predicted end, the model not asked
    assert (after_draft.name, after_draft.decision.call) == ("learned", None)
    assert Model.asked == 1
    counts = panel.counts["learned"]
    assert (counts.calls, counts.ends, counts.abstained) == (0, 2, 1)
    assert panel.counts["model"].calls == 1
    # The task ended after `a`: both ends (after the committed `a`, after the drafted `a`) were right.
    scored = panel.score_ends([a])
    assert (scored["learned"].ends_right, scored["learned"].ends_wrong) == (2, 0)
    # Had the authority gone on to `b`, they would both have been wrong.
    panel, *_ = anyio.run(play, Model(Decision(call=b)))
    assert (panel.score_ends([a, b])["learned"].ends_right, panel.counts["learned"].ends_wrong) == (0, 2)

    # A model's text or unusable call is no guess: the answer is "no call", from nobody.
    for unusable in (Decision(call=None, text="I am not sure"),
                     Decision(call=None, invalid=InvalidToolCall(name="a", raw_arguments="{", error="bad json"))):
        panel, start, *_ = anyio.run(play, Model(unusable))
        assert start.name is None and start.decision.call is None and panel.counts["model"].abstained == 1


def test_the_flag_is_repeatable(tau2_dir):
    from agentspec.cli import build_parser
    from agentspec.cli.run_modes import run_spec

    args = build_parser().parse_args(["run", "--bench", "tau2-telecom", "--agent", "oracle", "--mode", "sa",
                                      "--speculator-model", "noisy-oracle:0.9", "--speculator-model", "noisy-oracle:0.5",
                                      "--data-dir", str(tau2_dir)])
    spec = run_spec(args)
    assert spec.speculator_model == "noisy-oracle:0.9" and spec.more_speculators == ["noisy-oracle:0.5"]


def _tasks_of_two_decisions(governor, slowdown: float) -> list[bool]:
    """Eight tasks of two authority decisions each: a first call of 5 s (it prefills the ticket) and a `done` of
    1 s, each ``slowdown`` times longer while the speculator runs.  The speculator runs beside every decision the
    governor does not hold; returns whether each decision was held."""
    import anyio

    held: list[bool] = []

    async def play():
        for _ in range(8):
            for stratum, alone in ((0, 5.0), (1, 1.0)):
                hold = governor.hold(stratum) or not governor.active("model")
                held.append(hold)
                mark = governor.mark()
                if hold:
                    await anyio.sleep(alone)
                else:
                    with governor.speculating("model"):
                        await anyio.sleep(alone * slowdown)
                governor.observe_decision(mark, stratum)

    virtual(play)
    return held


def test_decisions_are_compared_with_the_baseline_of_their_own_stratum():
    """A first call takes five times a `done`: pooled together, a baseline of mostly first calls would call a
    speculator that slows every decision by 20% free, and one of mostly `done`s would call a harmless one costly.
    Each decision is compared with its own stratum's baseline (steps committed before it)."""
    from agentspec.runtime.governor.evidence import GovernorConfig
    from agentspec.runtime.governor.rule import Governor

    config = GovernorConfig(min_overlapped=4, min_clean=3, hold_every=1)
    costly = Governor(["model"], config)
    held = _tasks_of_two_decisions(costly, slowdown=1.2)
    report = costly.report()["model"]
    assert report["paused"], report
    # Held for a baseline in both strata (two each), then paused: every later decision runs alone.
    assert sum(held[:report["paused_at_step"]]) >= 4 and all(held[report["paused_at_step"]:])
    excess = [(s - 5.0 if k == 0 else s - 1.0) for s, _, k in costly.accounts["model"].overlapped]
    assert min(excess) > 0.19 and report["cost_s"] > 0

    harmless = Governor(["model"], config)
    held = _tasks_of_two_decisions(harmless, slowdown=1.0)
    report = harmless.report()["model"]
    assert not report["paused"] and report["cost_s"] == 0.0, report
    assert sum(held) <= 6  # the baseline it needed (two per stratum, then enough in all), nothing more
