"""qwen2.5-coder-1.5b as the agent on every harness but tau2 (experiments/harness_models.md).

Each harness's recorded run (``experiments/recordings/<harness>--qwen2.5-coder-1.5b``, made by
``experiments/harness_models.sh``) is replayed without the model: the real tools, sandboxes and scorers run again
on the recorded decisions, and the scores and call counts must come out as measured.  A replay fails when the
prompt the model saw changes (every request then misses): record again with the .sh and update the write-up.
The ``slow`` test plays one task of each harness with the live model and replays what it recorded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sandbox_support import needs_bwrap  # noqa: F401 - a fixture the sandboxed benches take
from test_appworld import fixture_root, venv  # noqa: F401 - AppWorld's venv and our generated fixture tasks

from agentspec.cli import main

REPO = Path(__file__).resolve().parents[1]
RECORDINGS = REPO / "experiments" / "recordings"
GAIA_FIXTURES = REPO / "tests" / "data" / "gaia-format"
AGENT = "qwen2.5-coder-1.5b"


@dataclass(frozen=True)
class Harness:
    """One recorded run: its flags (but the model, the recording and the data folder) and what it measured."""

    name: str
    folder: str
    """The recording's folder: ``experiments/recordings/<folder>--qwen2.5-coder-1.5b``."""
    argv: tuple[str, ...]
    modes: tuple[str, ...]
    measured: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per mode: the summary figures the recorded run gave."""
    rewards: dict[str, float] = field(default_factory=dict)
    """Per task: its reward (every mode plays the same decisions, so the same in each)."""

    @property
    def recording(self) -> Path:
        return RECORDINGS / f"{self.folder}--{AGENT}"

    def speculator(self) -> tuple[str, ...]:
        file = self.recording / "speculator.json"
        return ("--speculator-model", f"learned:{file}") if "sa" in self.modes else ()


def figures(reward: float, *, calls: int, executed: int, stops: dict[str, int], commits: int = 0) -> dict[str, Any]:
    """A mode's figures as :data:`FIGURES` names them: the mean reward, the authority's decisions, the calls run
    on the live state, the speculator's committed guesses and how the episodes ended."""
    return {"reward_mean": reward, "authority_calls": calls, "live_executions": executed, "commits_sa": commits,
            "terminations": stops}


BOTH = ("sequential", "sa")
HARNESSES = [
    Harness("workspace-demo", "workspace-demo",
            ("--bench", "workspace-demo", "--task-ids", "ws-todo-report,ws-sales-total"), BOTH,
            {mode: figures(0.0, calls=13, executed=12, stops={"agent_stop": 1, "max_steps": 1}) for mode in BOTH},
            {"ws-todo-report": 0.0, "ws-sales-total": 0.0}),
    Harness("appworld-address", "appworld",
            ("--bench", "appworld", "--task-ids", "agspecaddr_2", "--bench-option", "apps=supervisor"), BOTH,
            {mode: figures(0.0, calls=5, executed=4, stops={"agent_stop": 1}) for mode in BOTH},
            {"agspecaddr_2": 0.0}),
    Harness("appworld-note", "appworld", ("--bench", "appworld", "--task-ids", "agspecnote_1"), BOTH,
            {mode: figures(0.0, calls=9, executed=9, stops={"max_steps": 1}) for mode in BOTH},
            {"agspecnote_1": 0.0}),
    Harness("appworld-code", "appworld-code",
            ("--bench", "appworld", "--task-ids", "agspecaddr_2,agspecnote_1", "--bench-option", "actions=code"),
            ("sequential",), {"sequential": figures(0.0, calls=11, executed=10, stops={"agent_stop": 1, "max_steps": 1})},
            {"agspecaddr_2": 0.0, "agspecnote_1": 0.0}),
    Harness("gaia", "gaia", ("--bench", "gaia", "--backend", "overlay", "--task-ids", "ours-0001,ours-0002"), BOTH,
            {"sequential": figures(0.0, calls=6, executed=4, stops={"agent_stop": 2}),
             "sa": figures(0.0, calls=6, executed=2, stops={"agent_stop": 2}, commits=2)},  # read_attachment, guessed
            {"ours-0001": 0.0, "ours-0002": 0.0}),
]
FIGURES = ("reward_mean", "authority_calls", "live_executions", "commits_sa", "terminations")
"""What a replay reproduces: not the speculator's turns, which depend on how fast the authority answers."""


def data_dir(harness: Harness, request: pytest.FixtureRequest) -> tuple[str, ...]:
    if harness.name.startswith("appworld"):
        return ("--data-dir", str(request.getfixturevalue("fixture_root")))
    if harness.name == "gaia":
        return ("--data-dir", str(GAIA_FIXTURES))
    return ()


def run(capsys: pytest.CaptureFixture[str], harness: Harness, request: pytest.FixtureRequest,
        *argv: str) -> dict[str, Any]:
    code = main(["run", "--json", *harness.argv, *data_dir(harness, request), "--agent-model", AGENT, "--max-steps", "20",
                 "--no-progress", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out.strip().splitlines()[-1])


def rewards(out: Path, mode: str) -> dict[str, float]:
    episodes = json.loads((out / "results.json").read_text())["episodes"][mode]
    return {e["task_id"]: e["reward"] for e in episodes}


@pytest.mark.usefixtures("needs_bwrap")
@pytest.mark.parametrize("harness", HARNESSES, ids=[h.name for h in HARNESSES])
def test_the_recorded_run_replays_to_its_figures(harness: Harness, request: pytest.FixtureRequest,
                                                  capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    summary = run(capsys, harness, request, "--mode", ",".join(harness.modes), *harness.speculator(),
                  "--replay", str(harness.recording), "--latency-model", "smc-paper", "--out", str(tmp_path))
    assert summary["models"] == f"replayed from {harness.recording}" and summary["clock"].startswith("virtual")
    for mode in harness.modes:
        figures = {k: summary["modes"][mode][k] for k in FIGURES}
        assert figures == harness.measured[mode], mode
        assert rewards(tmp_path, mode) == harness.rewards, mode


@pytest.mark.slow
@pytest.mark.usefixtures("needs_bwrap")
@pytest.mark.parametrize("harness", HARNESSES, ids=[h.name for h in HARNESSES])
def test_the_live_model_plays_one_task_and_its_recording_replays(
        harness: Harness, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Minutes per harness on a CPU: the 1.5B model decides every step of the first task, sequentially."""
    first = harness.argv[harness.argv.index("--task-ids") + 1].split(",")[0]
    argv = list(harness.argv)
    argv[argv.index("--task-ids") + 1] = first
    one = Harness(harness.name, harness.folder, tuple(argv), ("sequential",))
    live = run(capsys, one, request, "--record", str(tmp_path / "rec"), "--out", str(tmp_path / "live"))
    figures = live["modes"]["sequential"]
    assert figures["failed_episodes"] == 0 and figures["authority_calls"] >= 1
    assert (tmp_path / "rec" / "responses.jsonl").read_text().count("\n") >= figures["authority_calls"] > 0
    replayed = run(capsys, one, request, "--replay", str(tmp_path / "rec"), "--out", str(tmp_path / "replay"))
    assert rewards(tmp_path / "replay", "sequential") == rewards(tmp_path / "live", "sequential")
    assert replayed["modes"]["sequential"]["authority_calls"] == figures["authority_calls"]
