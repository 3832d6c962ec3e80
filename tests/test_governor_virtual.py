"""On the virtual clock a speculator cannot slow the authority (model time comes from the latency model), so the
governor only measures and reports there: a run's figures are the same with and without it."""

from __future__ import annotations

import json

from agentspec.cli import main


def run(capsys, *argv):
    code = main(["run", "--json", "--bench", "tau2-telecom", "--no-progress", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out.strip().splitlines()[-1])


def test_the_governor_changes_nothing_on_the_virtual_clock(tau2_dir, capsys):
    # A weak speculator (right 30% of the time) over enough decisions for a verdict: on a real clock a costly one
    # would be held for baselines and paused; here neither may happen.
    argv = ["--split", "test", "--limit", "6", "--solo", "--agent", "oracle", "--speculator-model", "noisy-oracle:0.3",
            "--mode", "sequential,sa", "--latency-model", "smc-paper", "--data-dir", str(tau2_dir)]
    governed = run(capsys, *argv)
    free = run(capsys, *argv, "--no-governor")
    report = governed["modes"]["sa"].pop("governor")
    assert "governor" not in free["modes"]["sa"]
    assert not any(entry["paused"] for entry in report.values())
    for mode in ("sequential", "sa"):
        # wall_s is this machine's real time for the whole mode; every figure of the run itself must be equal.
        assert {k: v for k, v in governed["modes"][mode].items() if k != "wall_s"} == \
               {k: v for k, v in free["modes"][mode].items() if k != "wall_s"}
