"""Recorded runs of real agents (tau2-bench's simulation files in ``../shared/data/traces``) as agentspec runs.

One reader (:mod:`agentspec.bench.tau2.recorded`) turns them into recordings; from there they are re-scored by
agentspec's environment and evaluator (``agentspec score --runs``), replayed as the authority and its user
(``agentspec run --agent replay``) on their own clock (``--latency-model recorded``), mined and fitted on.  What a
user relies on: every recorded reward is reproduced, every mode keeps it, the recorded clock gives each episode its
recorded duration, and bad input is one line and exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentspec.bench.tau2.recorded import read_recording
from agentspec.cli import main
from agentspec.errors import ConfigError
from agentspec.pipeline import run
from agentspec.run_spec import RunSpec
from agentspec.runtime.chain_verification import ChainVerdict
from agentspec.runtime.recorded_agent import VERIFY_SHARE, RecordedAuthority
from agentspec.types import Observation

SOLO = "sierra_gpt-4.1_telecom_solo.json"
DEFAULT = "sierra_gpt-4.1_telecom_default.json"
GROK = "blake_grok-3_telecom-workflow.json"
GEMINI = "linyxus_gemini-3.1-flash-lite_telecom-workflow.json"
EXPECTED = {SOLO: ("gpt-4.1", True, "default", 40), DEFAULT: ("gpt-4.1", False, "default", 40),
            GROK: ("xai/grok-3", False, "workflow", 20), GEMINI: ("openrouter/google/gemini-3.1-flash-lite", False,
                                                                 "workflow", 27)}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any] | None, str]:
    """``agentspec ARGS`` in this process: exit code, last stdout line as JSON (None when none), stderr."""
    code = main(list(args))
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    return code, json.loads(lines[-1]) if lines and code == 0 else None, err


# --- the reader --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_shared_recording_is_read_whole(bench: Any, traces_dir: Path, name: str) -> None:
    recording = read_recording(bench, traces_dir / name)
    assert recording is not None
    model, solo, policy, simulations = EXPECTED[name]
    assert (recording.agent_model, recording.solo, recording.policy, len(recording.episodes)) == (model, solo, policy,
                                                                                                  simulations)
    raw = json.loads((traces_dir / name).read_text(encoding="utf-8"))["simulations"]
    for episode, sim in zip(recording.episodes, raw, strict=True):
        calls = [c for m in sim["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        assert [c.name for c in episode.calls()] == [c["name"] for c in calls]
        assert episode.reward == sim["reward_info"]["reward"] and episode.untimed is None
        # The recorded clock's times add up to the simulation's own duration (the greeting is instant).
        total = sum(d.seconds or 0 for d in episode.decisions) + sum(
            (t.reply_seconds or 0) + sum(c.seconds or 0 for c in t.calls) for t in episode.turns)
        assert total == pytest.approx(sim["duration"], abs=0.2)
        if not solo:  # every user turn's calls are the user's device calls, in order
            user_calls = [c["name"] for m in sim["messages"] if m["role"] == "user" for c in m.get("tool_calls") or []]
            assert [c.call.name for t in episode.turns for c in t.calls] == user_calls


def test_an_agentspec_run_is_not_a_recording(bench: Any, tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text('{"format": "agentspec.results/v2", "config": {}}', encoding="utf-8")
    assert read_recording(bench, tmp_path) is None and read_recording(bench, tmp_path / "results.json") is None


def _edited(traces_dir: Path, tmp_path: Path, name: str, edit: Any) -> Path:
    document = json.loads((traces_dir / name).read_text(encoding="utf-8"))
    edit(document)
    path = tmp_path / f"edited-{name}"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _set_domain(doc: dict[str, Any]) -> None:
    doc["info"]["environment_info"]["domain_name"] = "airline"


def _foreign_task(doc: dict[str, Any]) -> None:
    doc["simulations"][1]["task_id"] = "[airline]book_flight"


def _foreign_tool(doc: dict[str, Any]) -> None:
    doc["simulations"][0]["messages"][0]["tool_calls"][0]["name"] = "book_reservation"


def _no_messages(doc: dict[str, Any]) -> None:
    del doc["simulations"][2]["messages"]


@pytest.mark.parametrize(("edit", "says"), [
    (_set_domain, "a run of tau2's 'airline' domain; tau2-telecom reads 'telecom' runs"),
    (_foreign_task, "1 task id(s) not in the tau2-telecom data: '[airline]book_flight'"),
    (_foreign_tool, "the agent calls 'book_reservation', a tool tau2-telecom does not have"),
    (_no_messages, "not a tau2-bench results file: at simulations.2.messages: Field required"),
])
def test_bad_recordings_are_one_line_and_exit_2(tau2_dir: Path, traces_dir: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str], edit: Any, says: str) -> None:
    path = _edited(traces_dir, tmp_path, SOLO, edit)
    code, _, err = cli(capsys, "score", "--bench", "tau2-telecom", "--runs", str(path), "--data-dir", str(tau2_dir))
    assert code == 2 and err.count("\n") == 1 and says in err, err


def test_a_truncated_recording_is_one_line_and_exit_2(tau2_dir: Path, traces_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cut = tmp_path / "cut.json"
    cut.write_bytes((traces_dir / SOLO).read_bytes()[:50_000])
    for command in (["score", "--runs", str(cut)], ["run", "--agent", "replay", "--runs", str(cut)],
                    ["speculator", "score", "--split", "test", "--speculator", str(cut), "--runs", str(cut)]):
        code, _, err = cli(capsys, *command, "--bench", "tau2-telecom", "--data-dir", str(tau2_dir))
        assert code == 2 and err.count("\n") == 1, err


def test_a_made_up_tool_the_recording_answered_with_an_error_is_the_agents_mistake(bench: Any, traces_dir: Path) -> None:
    """gemini-3.1-flash-lite once calls toggle_mobile_data, which tau2 has not either (its answer is an error):
    read, and answered the same way by agentspec (score's parity test covers the answer)."""
    recording = read_recording(bench, traces_dir / GEMINI)
    assert recording is not None
    assert any(c.name == "toggle_mobile_data" for e in recording.episodes for c in e.calls())


def test_the_recorded_clock_needs_every_timestamp(tau2_dir: Path, traces_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    def untimed(doc: dict[str, Any]) -> None:
        doc["simulations"] = doc["simulations"][:2]
        del doc["simulations"][0]["messages"][3]["timestamp"]

    path = _edited(traces_dir, tmp_path, DEFAULT, untimed)
    base = ["run", "--json", "--bench", "tau2-telecom", "--agent", "replay", "--runs", str(path), "--data-dir", str(tau2_dir),
            "--no-progress"]
    code, summary, _ = cli(capsys, *base)  # no clock needed: it plays
    assert code == 0 and summary is not None and summary["modes"]["sequential"]["episodes"] == 2
    code, _, err = cli(capsys, *base, "--latency-model", "recorded")
    assert code == 2 and err.count("\n") == 1 and "message 3 (user) has no timestamp" in err, err


# --- re-evaluation --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_recorded_reward_is_reproduced_by_agentspec(tau2_dir: Path, traces_dir: Path, name: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Parity on real models' mistakes: every simulation's calls replayed on agentspec's environment, scored by its
    evaluator, give the recorded reward; every environment assertion and action check comes out as recorded, and
    every call answers what the recording's environment answered."""
    code, scored, err = cli(capsys, "score", "--bench", "tau2-telecom", "--runs", str(traces_dir / name), "--data-dir",
                            str(tau2_dir))
    assert code == 0 and scored is not None, err
    assert scored["simulations"] == EXPECTED[name][3] == scored["rewards_equal"]
    assert scored["checks_differing"] == 0 and scored["observation_mismatches"] == 0 and scored["differing"] == []


# --- the recorded authority ---------------------------------------------------------------------------------


def _three(traces_dir: Path, name: str) -> list[str]:
    sims = json.loads((traces_dir / name).read_text(encoding="utf-8"))["simulations"]
    return [s["task_id"] for s in sims[:3]]


@pytest.mark.parametrize("name", [SOLO, DEFAULT])
def test_every_mode_keeps_the_recorded_rewards_and_the_recorded_clock_its_times(bench: Any, tau2_dir: Path,
                                                                                traces_dir: Path, name: str) -> None:
    spec = RunSpec.of(bench="tau2-telecom", data_dir=str(tau2_dir), agent="replay", runs=str(traces_dir / name),
                      task_ids=_three(traces_dir, name), modes="sequential,sa,smc", speculator_model="noisy-oracle:1.0",
                      latency_model="recorded", tool_latency=1.0, progress=False)
    outcome = run(spec)
    recording = read_recording(bench, traces_dir / name)
    assert recording is not None
    sequential = outcome.modes["sequential"].episodes
    for mode, result in outcome.modes.items():
        records = [e.record() for e in result.episodes]
        for record in records:
            episode = recording.episode(record["task_id"])
            assert record["reward"] == episode.reward, mode
            assert record["execution"]["metrics"]["observation_mismatches"] == 0
        assert [r["reward"] for r in records] == [e.record()["reward"] for e in sequential]
    for episode in sequential:  # sequential: the recording's own duration plus 1 s per call made
        record = episode.record()
        recorded = recording.episode(record["task_id"])
        calls = record["tool_calls"]
        assert record["execution"]["metrics"]["wall_s"] == pytest.approx(recorded.duration_s + calls, abs=0.2)
    summary = outcome.results().summary.as_dict()
    assert summary["recording"]["sha256"] == recording.digest and summary["agent"] == "replay"
    # A speculator that always names the next call hides every tool's second: sa is faster, smc no slower.
    assert summary["speedup_vs_sequential"]["sa"] > 1.05
    assert summary["speedup_vs_sequential"]["smc"] >= summary["speedup_vs_sequential"]["sa"] - 0.02


@pytest.mark.parametrize(("flags", "says"), [
    (["--agent", "replay"], "--agent replay plays a recorded run: give it with --runs FILE"),
    (["--agent", "oracle", "--runs", "X"], "--runs names the recorded run --agent replay plays"),
    (["--agent", "oracle", "--latency-model", "recorded"], "--latency-model recorded is a recording's own clock"),
    (["--agent", "replay", "--runs", "X", "--mode", "spork", "--speculator-model", "noisy-oracle:1"], "SPORK probes"),
    (["--agent", "replay", "--runs", "X", "--mode", "smc", "--speculator-model", "noisy-oracle:1", "--macro-commit",
      "trusted"], "smc must verify each chain against it"),
    (["--agent", "oracle", "--tool-latency", "1"], "--tool-latency times tools on a latency model's clock"),
    (["--agent", "oracle", "--latency-model", "smc-paper", "--tool-latency", "-1"], "seconds must be a finite number"),
])
def test_replay_flags_that_cannot_work_are_refused(tau2_dir: Path, capsys: pytest.CaptureFixture[str],
                                                   flags: list[str], says: str) -> None:
    code, _, err = cli(capsys, "run", "--bench", "tau2-telecom", *flags, "--data-dir", str(tau2_dir), "--no-progress")
    assert code == 2 and err.count("\n") == 1 and says in err, err


def test_a_recording_with_a_user_is_not_played_solo(tau2_dir: Path, traces_dir: Path) -> None:
    with pytest.raises(ConfigError, match="was recorded with a user"):
        run(RunSpec.of(bench="tau2-telecom", data_dir=str(tau2_dir), agent="replay", runs=str(traces_dir / DEFAULT),
                       solo=True, limit=1, progress=False))


def test_a_verified_chain_costs_a_share_of_the_decisions_it_stands_for(bench: Any, traces_dir: Path) -> None:
    recording = read_recording(bench, traces_dir / SOLO)
    assert recording is not None
    episode = recording.episodes[0]
    authority = RecordedAuthority(episode, timed=True)
    first, second, third = episode.decisions[:3]
    assert first.call is not None and second.call is not None and third.call is not None
    chain = [(second.call, Observation(call_id="a", name=second.call.name, content="x")),
             (first.call, Observation(call_id="b", name=first.call.name, content="y"))]

    async def verify() -> tuple[ChainVerdict, float]:
        started = anyio.current_time()
        verdict = await authority.verify_chain([(first.call, None)], chain)
        return verdict, anyio.current_time() - started

    from trio.testing import MockClock

    verdict, took = anyio.run(verify, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})
    assert (verdict.accepted, verdict.steps) == (1, 2)  # the second step is not the agent's third decision
    # Both offered steps are paid for: one forward prefills the whole chain.
    assert took == pytest.approx(VERIFY_SHARE * ((second.seconds or 0) + (third.seconds or 0)))
    assert verdict.seconds == pytest.approx(took)


# --- fitting and mining on recordings -----------------------------------------------------------------------


def test_a_speculator_fitted_on_a_recording_is_refused_on_it_and_scored_on_another(
        tau2_dir: Path, traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.json"
    code, fitted, err = cli(capsys, "speculator", "fit", "--bench", "tau2-telecom", "--split", "train", "--no-gold",
                            "--runs", str(traces_dir / DEFAULT), "--data-dir", str(tau2_dir), "--out", str(spec))
    assert code == 0 and fitted is not None and fitted["trajectories"] == 40, err  # every episode, failed ones too
    artifact = json.loads(spec.read_text(encoding="utf-8"))["fitted_on"]
    assert len(artifact["recordings"]) == 1 and artifact["own_task_ids"] == []
    score = ["speculator", "score", "--bench", "tau2-telecom", "--split", "test", "--speculator", str(spec),
             "--data-dir", str(tau2_dir)]
    code, _, err = cli(capsys, *score, "--runs", str(traces_dir / DEFAULT))
    assert code == 2 and "fitted on this very recording" in err
    code, scored, err = cli(capsys, *score, "--runs", str(traces_dir / SOLO))
    assert code == 0 and scored is not None and scored["steps"] == 626, err  # gpt-4.1 solo's every call
    assert scored["exact_at_1"] > 0.1
    code, _, err = cli(capsys, *score)  # gold calls of test tasks another model's recording covered: held out
    assert code == 2 and "were in the speculator's fit" in err


def test_macros_are_mined_from_every_episode_of_a_recording(tau2_dir: Path, traces_dir: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "macros.json"
    code, mined, err = cli(capsys, "mine", "--bench", "tau2-telecom", "--split", "train", "--no-gold", "--runs",
                           str(traces_dir / GROK), "--speculator-model", "noisy-oracle:0.8", "--data-dir", str(tau2_dir),
                           "--out", str(out))
    assert code == 0 and mined is not None, err
    assert mined["trajectories"]["runs"] == 20 and mined["trajectories"]["outside_split"] == 0
    assert mined["funnel"]["kept"] > 0


def test_a_report_shows_a_recording_beside_its_replay(tau2_dir: Path, traces_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``agentspec report`` reads the recording itself (one mode, ``recorded``, on its own clock) and the run that
    replayed it through the Python API (:func:`agentspec.api.run`, the CLI's pipeline)."""
    from agentspec.api import run as api_run

    tasks = _three(traces_dir, DEFAULT)
    replayed = tmp_path / "replayed"
    api_run(RunSpec.of(bench="tau2-telecom", data_dir=str(tau2_dir), agent="replay", runs=str(traces_dir / DEFAULT),
                       task_ids=tasks, latency_model="recorded", progress=False, out=str(replayed)))
    page = tmp_path / "report.html"
    code, summary, err = cli(capsys, "report", str(traces_dir / DEFAULT), str(replayed), "--bench", "tau2-telecom",
                             "--data-dir", str(tau2_dir), "--out", str(page))
    assert code == 0 and summary is not None and (summary["runs"], summary["modes"]) == (2, 2), err
    html = page.read_text(encoding="utf-8")
    assert "recorded: gpt-4.1" in html and all(task in html for task in tasks)
    code, _, err = cli(capsys, "report", str(traces_dir / DEFAULT), "--out", str(page))  # no bench to read it with
    assert code == 2 and err.count("\n") == 1 and "not the results.json of" in err


def test_a_newer_tau2_run_folder_is_read_like_its_file(bench: Any, traces_dir: Path, tmp_path: Path) -> None:
    """A newer tau2 release writes a run into a folder (its ``results.json``, with extra keys per run, simulation
    and message, as the gemini recording has): the folder reads as the file does."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.json").write_bytes((traces_dir / GEMINI).read_bytes())
    from_folder, from_file = read_recording(bench, folder), read_recording(bench, traces_dir / GEMINI)
    assert from_folder is not None and from_file is not None
    assert from_folder.digest == from_file.digest and from_folder.episodes[3].calls() == from_file.episodes[3].calls()


def test_an_answer_other_than_the_recordings_is_counted_and_the_run_goes_on(tau2_dir: Path, traces_dir: Path,
                                                                             tmp_path: Path) -> None:
    """Decisions cannot change: where agentspec's environment answers a call otherwise than the recording says, the
    recorded agent makes its next decision all the same, and the episode counts the difference."""
    def reworded(doc: dict[str, Any]) -> None:
        doc["simulations"] = doc["simulations"][:1]
        answer = next(m for m in doc["simulations"][0]["messages"] if m["role"] == "tool")
        answer["content"] = "something else"

    path = _edited(traces_dir, tmp_path, SOLO, reworded)
    outcome = run(RunSpec.of(bench="tau2-telecom", data_dir=str(tau2_dir), agent="replay", runs=str(path),
                             progress=False))
    (episode,) = outcome.modes["sequential"].episodes
    record = episode.record()
    assert record["execution"]["metrics"]["observation_mismatches"] == 1
    assert record["reward"] == record["execution"]["recorded"]["reward"] and record["termination"] == "agent_stop"


# --- what speculation saves a recorded agent: the figures of experiments/recorded_authorities.md on a slice ---


@pytest.fixture(scope="module")
def slice_fit(tau2_dir: Path, traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A speculator (history only, as the experiment's runs use it) and a macro library, from two other models'
    recordings: gpt-4.1 with a user and grok-3."""
    folder = tmp_path_factory.mktemp("slice")
    others = [str(traces_dir / DEFAULT), str(traces_dir / GROK)]
    speculator, macros = folder / "speculator.json", folder / "macros.json"
    assert main(["speculator", "fit", "--bench", "tau2-telecom", "--split", "train", "--no-gold", "--lookahead-cap",
                 "0", "--runs", *others, "--data-dir", str(tau2_dir), "--out", str(speculator)]) == 0
    assert main(["mine", "--bench", "tau2-telecom", "--split", "train", "--no-gold", "--runs", *others,
                 "--speculator-model", "noisy-oracle:0.8", "--data-dir", str(tau2_dir), "--out", str(macros)]) == 0
    return speculator, macros


@pytest.mark.parametrize(("speculator", "tools", "floors"), [
    ("learned", 1.0, {"sa": 1.04, "smc": 1.08}),   # measured 1.07, 1.14
    ("learned", 0.0, {"sa": 0.99, "smc": 0.99}),   # 1.00, 1.07: never slower
    ("ceiling", 1.0, {"sa": 1.15, "smc": 1.25}),   # 1.18, 1.33
])
def test_speculation_saves_gpt41_solo_its_own_time_at_equal_rewards(tau2_dir: Path, traces_dir: Path,
                                                                   slice_fit: tuple[Path, Path], speculator: str,
                                                                   tools: float, floors: dict[str, float]) -> None:
    """gpt-4.1 solo's first 8 episodes on their recorded clock: a learned speculator fitted on other models' runs
    (or one always right, the ceiling) makes every mode at least as fast as the floor, rewards as recorded."""
    spec_file, macros = slice_fit
    model = f"learned:{spec_file}" if speculator == "learned" else "noisy-oracle:1.0"
    sims = json.loads((traces_dir / SOLO).read_text(encoding="utf-8"))["simulations"][:8]
    outcome = run(RunSpec.of(bench="tau2-telecom", data_dir=str(tau2_dir), agent="replay", runs=str(traces_dir / SOLO),
                             task_ids=[s["task_id"] for s in sims], modes="sequential,sa,smc", speculator_model=model,
                             macros=str(macros), latency_model="recorded", tool_latency=tools, progress=False))
    summary = outcome.results().summary.as_dict()
    recorded = [s["reward_info"]["reward"] for s in sims]
    for mode, result in outcome.modes.items():
        assert [e.record()["reward"] for e in result.episodes] == recorded, mode
    for mode, floor in floors.items():
        assert summary["speedup_vs_sequential"][mode] >= floor, (mode, summary["speedup_vs_sequential"])
