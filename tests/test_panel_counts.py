"""A panel of speculators (``--speculator-model`` given again) reports per member what it answered: each episode's
counts in its ``execution.metrics.speculators``, summed per mode in the summary's ``speculators``; a run with one
speculator has neither."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from agentspec.cli import main
from agentspec.results import Results
from agentspec.runtime.governor.panel import SpeculatorPanel, panel_counts
from agentspec.runtime.metrics import ExecutionMetrics
from agentspec.runtime.policies.protocol import Decision
from agentspec.runtime.summary import aggregate
from agentspec.types import ToolCall

NOISY = "noisy-oracle:0.5"


@pytest.fixture(scope="module")
def learned_file(bench, tmp_path_factory) -> Path:
    """A learned speculator that sometimes has no guess: fitted on four train tasks of another issue
    (``service_issue``) than the run's first test tasks (``mms_issue``), without its unconditioned n-gram
    back-off (context ``0:``), it abstains after a call its fit never saw, and the next member answers."""
    from agentspec.learned_speculator.command import fit_bench

    other = [task for task in bench.tasks("train") if task.id.startswith("[service_issue]")][:4]
    artifact = anyio.run(lambda: fit_bench(bench, other, split="train"))
    path = tmp_path_factory.mktemp("panel") / "spec.json"
    artifact.save(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    del data["model"]["ngrams"]["0:"]
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def run(tau2_dir: Path, out: Path, capsys, *speculators: str) -> Results:
    flags = [flag for model in speculators for flag in ("--speculator-model", model)]
    code = main(["run", "--bench", "tau2-telecom", "--data-dir", str(tau2_dir), "--split", "test", "--limit", "3",
                 "--agent", "oracle", "--solo", "--mode", "sequential,sa", "--latency-model", "smc-paper",
                 "--no-progress", "--out", str(out), *flags])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return Results.load(out)


def test_a_panel_reports_each_members_counts_per_episode_and_per_mode(tau2_dir, learned_file, tmp_path, capsys):
    learned = f"learned:{learned_file}"
    results = run(tau2_dir, tmp_path / "panel", capsys, learned, NOISY)
    summary = results.summary.modes["sa"].as_dict()
    panel = summary["speculators"]
    assert list(panel) == [learned, NOISY]
    first, second = panel[learned], panel[NOISY]
    for counts in panel.values():
        assert set(counts) == {"calls", "ends", "abstained", "ends_right", "ends_wrong"}
        assert counts["ends_right"] + counts["ends_wrong"] == counts["ends"]
    # The noisy oracle is asked only where the learned one had no guess (never more often: a chain reset may
    # cancel a request after the abstention was counted).
    assert first["abstained"] > 0 and first["calls"] > 0
    assert 0 < second["calls"] + second["ends"] + second["abstained"] <= first["abstained"]

    per_episode = [record.as_dict()["execution"]["metrics"]["speculators"] for record in results.episodes["sa"]]
    assert len(per_episode) == 3
    for name, total in panel.items():
        assert total == {key: sum(episode[name][key] for episode in per_episode) for key in total}
    for episode in per_episode:
        assert episode[NOISY]["calls"] + episode[NOISY]["ends"] + episode[NOISY]["abstained"] \
            <= episode[learned]["abstained"]

    # sequential has no speculator, hence no panel; results.json holds what was loaded.
    assert "speculators" not in results.summary.modes["sequential"].as_dict()
    assert all("speculators" not in r.as_dict()["execution"]["metrics"] for r in results.episodes["sequential"])
    written = json.loads((tmp_path / "panel" / "results.json").read_text(encoding="utf-8"))
    assert written["summary"]["modes"]["sa"]["speculators"] == panel


def test_one_speculator_has_no_panel_counts(tau2_dir, tmp_path, capsys):
    results = run(tau2_dir, tmp_path / "one", capsys, NOISY)  # under the governor: a panel of one
    for mode, records in results.episodes.items():
        assert "speculators" not in results.summary.modes[mode].as_dict()
        assert all("speculators" not in r.as_dict()["execution"]["metrics"] for r in records)


def test_ends_are_scored_once_and_only_for_a_panel_of_two_or_more():
    a, b = ToolCall(name="a"), ToolCall(name="b")

    class EndsAfterA:
        async def guess(self, history):
            return Decision(call=None) if history else None  # no guess at the start

        async def decide(self, history):
            return await self.guess(history) or Decision(call=None)

    class Calls:
        async def decide(self, history):
            return Decision(call=b)

    async def play(panel: SpeculatorPanel) -> None:
        await panel.propose([])
        await panel.propose([(a, None)])

    panel = SpeculatorPanel([("learned", EndsAfterA()), ("model", Calls())])
    anyio.run(play, panel)
    counts = panel_counts(panel, [a])
    assert counts == {"learned": {"calls": 0, "ends": 1, "abstained": 1, "ends_right": 1, "ends_wrong": 0},
                      "model": {"calls": 1, "ends": 0, "abstained": 0, "ends_right": 0, "ends_wrong": 0}}
    assert panel_counts(panel, [a])["learned"]["ends_right"] == 1  # already scored: not counted again

    alone = SpeculatorPanel([("learned", EndsAfterA())])
    anyio.run(play, alone)
    assert panel_counts(alone, [a]) is None and panel_counts(Calls(), [a]) is None
    assert alone.counts["learned"].ends_right == 0  # a panel of one is not scored (nothing reports it)

    # Episodes without a panel add nothing to the mode's sums; without any, there is no key.
    with_panel = ExecutionMetrics(speculators=counts)
    summed = aggregate([with_panel, ExecutionMetrics(), with_panel])["speculators"]
    assert summed["learned"] == {"calls": 0, "ends": 2, "abstained": 2, "ends_right": 2, "ends_wrong": 0}
    assert "speculators" not in aggregate([ExecutionMetrics()])
    assert "speculators" not in ExecutionMetrics().as_dict()
