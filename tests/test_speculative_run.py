"""`agentspec run --mode ...` on tau2-telecom: oracle authority, noisy-oracle or LLM speculator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted_openai_server import ScriptedOpenAIServer

from agentspec.cli import main
from agentspec.macros import Macro, MacroLibrary, MacroStep

AIRPLANE = "[service_issue]airplane_mode_on[PERSONA:None]"
SHIPPED = Path(__file__).resolve().parents[1] / "macros" / "tau2-telecom.json"


def run(capsys, *argv):
    code = main(["run", "--json", "--bench", "tau2-telecom", "--no-progress", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out.strip().splitlines()[-1])


def test_sa_and_smc_keep_reward_and_beat_sequential_on_the_virtual_clock(tau2_dir, tmp_path, capsys):
    summary = run(capsys, "--split", "base", "--solo", "--agent", "oracle", "--mode", "sequential,sa,smc", "--speculator-model",
                  "noisy-oracle:0.8", "--latency-model", "smc-paper", "--data-dir", str(tau2_dir), "--out", str(tmp_path),
                  "--timeline", str(tmp_path / "timeline.png"))
    modes = summary["modes"]
    assert list(modes) == ["sequential", "sa", "smc"]
    for key in ("tasks", "reward_mean", "wall_s", "authority_calls", "commits_sa", "commits_macro", "wasted_tool_calls"):
        assert all(key in modes[m] for m in modes)
    # Nothing at top level looks like one mode's figure: per-mode numbers live under "modes" only.
    assert not {"reward_mean", "wall_s", "mean_task_wall_s", "authority_calls", "commits_sa", "mode"} & set(summary)
    assert summary["tasks"] == 114 and summary["run_wall_s"] > 0
    assert summary["clock"].startswith("virtual") and summary["latency_model"] == "smc-paper"
    assert all(modes[m]["tasks"] == 114 for m in modes)
    assert modes["sequential"]["reward_mean"] == modes["sa"]["reward_mean"] == 1.0  # SA is lossless
    # smc now commits macros from the shipped library (it used to run as sa): a macro commit is not checked by the
    # authority, and on base one task (mobile_data ... data_usage_exceeded ...) refuels twice at noisy-oracle:0.8.
    assert modes["smc"]["commits_macro"] > 0 and modes["smc"]["reward_mean"] >= 113 / 114
    assert modes["sa"]["mean_task_wall_s"] < modes["sequential"]["mean_task_wall_s"]
    assert modes["smc"]["mean_task_wall_s"] <= modes["sa"]["mean_task_wall_s"] + 1e-9
    speedup = summary["speedup_vs_sequential"]
    assert speedup["sequential"] == 1.0 and speedup["sa"] > 1.0
    assert speedup["sa"] == round(modes["sequential"]["mean_task_wall_s"] / modes["sa"]["mean_task_wall_s"], 4)
    assert modes["sa"]["commits_sa"] > 0 and modes["sequential"]["commits_sa"] == 0
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["episodes"]) == {"sequential", "sa", "smc"}
    assert results["summary"]["modes"] == modes and results["summary"]["speedup_vs_sequential"] == speedup


def test_smc_commits_macros_from_a_library(tau2_dir, tmp_path, capsys):
    library = MacroLibrary(bench="tau2-telecom", parameters={"tau": 0.5}, macros=[
        Macro(id="apn-fix", n=20, k=19, lcb=0.8, steps=[MacroStep(name="reset_apn_settings"), MacroStep(name="reboot_device")]),
    ])
    library.save(tmp_path / "macros.json")
    summary = run(capsys, "--task-ids", "[service_issue]break_apn_settings[PERSONA:None]", "--solo", "--agent", "oracle", "--mode", "sa,smc",
                  "--speculator-model", "noisy-oracle:1.0", "--latency-model", "smc-paper", "--macros", str(tmp_path / "macros.json"),
                  "--data-dir", str(tau2_dir), "--out", str(tmp_path))
    assert summary["modes"]["smc"]["commits_macro"] == 1 and summary["modes"]["smc"]["authority_skipped"] == 1
    assert summary["modes"]["smc"]["reward_mean"] == 1.0
    assert summary["modes"]["smc"]["authority_calls"] == summary["modes"]["sa"]["authority_calls"] - 1
    episode = json.loads((tmp_path / "results.json").read_text())["episodes"]["smc"][0]
    assert episode["execution"]["sources"] == ["sa", "macro"] and episode["execution"]["macros_fired"] == ["apn-fix"]


def test_resume_skips_finished_tasks(tau2_dir, tmp_path, capsys):
    argv = ["--split", "small", "--solo", "--agent", "oracle", "--mode", "sa", "--speculator-model", "noisy-oracle:0.7",
            "--latency-model", "smc-paper", "--data-dir", str(tau2_dir), "--out", str(tmp_path)]
    first = run(capsys, *argv)
    log = (tmp_path / "run-sa.log.jsonl").read_text().splitlines()
    commits = sum(1 for line in log if json.loads(line)["type"] == "commit")
    again = run(capsys, *argv, "--resume")
    assert again["modes"]["sa"]["reward_mean"] == first["modes"]["sa"]["reward_mean"] == 1.0
    log_after = (tmp_path / "run-sa.log.jsonl").read_text().splitlines()
    assert sum(1 for line in log_after if json.loads(line)["type"] == "commit") == commits  # nothing re-applied


@pytest.mark.parametrize(("argv", "message"), [
    (["--mode", "turbo", "--agent", "oracle"], "unknown mode"),
    (["--mode", "sa", "--agent", "oracle"], "--speculator-model"),
    (["--mode", "sa", "--agent", "oracle", "--speculator-model", "noisy-oracle:2"], "in [0, 1]"),
    (["--mode", "sa", "--agent-model", "http://127.0.0.1:9/v1#m", "--speculator-model", "noisy-oracle:0.5"], "need the gold calls"),
    (["--mode", "sa", "--agent", "oracle", "--speculator-model", "noisy-oracle:0.5", "--latency-model", "nope"], "preset"),
    (["--mode", "smc", "--agent", "oracle", "--speculator-model", "noisy-oracle:0.5", "--macros", "/nonexistent.json"], "cannot read"),
])
def test_bad_flags_exit_2(tau2_dir, capsys, argv, message):
    code = main(["run", "--bench", "tau2-telecom", "--data-dir", str(tau2_dir), "--limit", "1", "--no-progress", *argv])
    assert code == 2 and message in capsys.readouterr().err


def test_llm_authority_and_llm_speculator_over_http(tau2_dir, tmp_path, capsys):
    """A solo LLM authority and LLM speculator on real HTTP (scripted test double); the speculator is right."""
    plan = [{"name": "toggle_airplane_mode", "arguments": {}}, {"name": "done", "arguments": {}}]

    def responder(request):
        step = sum(1 for m in request["messages"] if m["role"] == "tool")
        reply = {"tool_calls": [plan[min(step, 1)]]}
        if request["model"] == "authority":
            reply["delay_s"] = 0.3  # the authority thinks longer than the speculator
        return reply

    with ScriptedOpenAIServer(responder, models=("authority", "speculator")) as srv:
        summary = run(capsys, "--task-ids", AIRPLANE, "--solo", "--mode", "sequential,sa", "--agent-model",
                      f"{srv.base_url}#authority", "--speculator-model", f"{srv.base_url}#speculator",
                      "--data-dir", str(tau2_dir), "--out", str(tmp_path))
    assert summary["clock"] == "wall"
    assert summary["modes"]["sa"]["reward_mean"] == 1.0 and summary["modes"]["sa"]["commits_sa"] == 1
    assert summary["modes"]["sequential"]["reward_mean"] == 1.0


def test_spork_over_http_with_a_reasoning_llm_authority(tau2_dir, capsys):
    """`--mode spork --answer-prefix`: the agent reasons first; a confident probe's call commits early."""
    import re

    call_text = 'toggle_airplane_mode", "arguments": {}}\n```'
    sure = [{"token": t, "logprob": -0.01, "bytes": list(t.encode()), "top_logprobs": []}
            for t in re.findall(r"\s*\S+|\s+", call_text)]
    bodies = []

    def responder(request):
        bodies.append(request)
        if request.get("agentspec_hint_for"):
            return {"content": call_text, "logprobs": sure}
        if any(m["role"] == "tool" for m in request["messages"]):
            return {"tool_calls": [{"name": "done", "arguments": {}}]}
        return {"content": " The phone is in airplane mode, so I will switch it off.",
                "tool_calls": [{"name": "toggle_airplane_mode", "arguments": {}}], "chunk_delay_s": 0.05}

    with ScriptedOpenAIServer(responder) as srv:
        summary = run(capsys, "--task-ids", AIRPLANE, "--solo", "--mode", "spork", "--agent-model", srv.base_url,
                      "--answer-prefix", "Thought:", "--probe-every", "4", "--no-cost-model", "--data-dir", str(tau2_dir))
    spork = summary["modes"]["spork"]
    assert spork["reward_mean"] == 1.0
    assert spork["commits_spork"] == 1 and spork["probe_hits"] >= 1
    first = next(b for b in bodies if b.get("agentspec_request_id"))
    assert first["tool_choice"] == "auto" and first["messages"][-1] == {"role": "assistant", "content": "Thought:"}


def test_verified_macro_commits_update_the_saved_library(tau2_dir, tmp_path, capsys):
    library = MacroLibrary(bench="tau2-telecom", parameters={"tau": 0.5}, macros=[
        Macro(id="apn-fix", n=20, k=19, lcb=0.8, steps=[MacroStep(name="reset_apn_settings"), MacroStep(name="reboot_device")]),
    ])
    library.save(tmp_path / "macros.json")
    summary = run(capsys, "--task-ids", "[service_issue]break_apn_settings[PERSONA:None]", "--trials", "2", "--solo", "--agent", "oracle",
                  "--mode", "smc", "--speculator-model", "noisy-oracle:1.0", "--latency-model", "smc-paper",
                  "--macros", str(tmp_path / "macros.json"), "--verify-macros", "--macros-out", str(tmp_path / "out.json"),
                  "--data-dir", str(tau2_dir))
    smc = summary["modes"]["smc"]
    assert smc["macro_firings"] == 2 and smc["macro_checks"] == 2 and smc["macro_disagreements"] == 0
    updated = MacroLibrary.load(tmp_path / "out.json").macros[0]
    assert (updated.n, updated.k) == (22, 21)
    # Checking a macro is off the critical path: it takes no simulated time.
    unchecked = run(capsys, "--task-ids", "[service_issue]break_apn_settings[PERSONA:None]", "--trials", "2", "--solo",
                    "--agent", "oracle", "--mode", "smc", "--speculator-model", "noisy-oracle:1.0", "--latency-model", "smc-paper",
                    "--macros", str(tmp_path / "macros.json"), "--data-dir", str(tau2_dir))
    assert unchecked["modes"]["smc"]["mean_task_wall_s"] == smc["mean_task_wall_s"]


def test_ratios_against_a_baseline_run(tau2_dir, tmp_path, capsys):
    common = ["--split", "small", "--agent", "oracle", "--latency-model", "smc-paper", "--data-dir", str(tau2_dir)]
    speculator = ["--speculator-model", "noisy-oracle:0.9"]
    base = run(capsys, *common, "--mode", "sequential", "--out", str(tmp_path / "base"))
    summary = run(capsys, *common, *speculator, "--mode", "sa", "--baseline", str(tmp_path / "base"))
    assert summary["vs_baseline"]["baseline_mean_task_wall_s"] == base["modes"]["sequential"]["mean_task_wall_s"]
    assert summary["vs_baseline"]["baseline_mode"] == "sequential" and summary["vs_baseline"]["speedup"]["sa"] > 1.0
    assert summary["speedup_vs_sequential"] is None  # this run had no sequential mode of its own
    assert main(["run", "--bench", "tau2-telecom", *common, *speculator, "--mode", "sa", "--baseline", str(tmp_path)]) == 2


def test_smc_without_macros_uses_the_shipped_library_and_says_so(tau2_dir, capsys):
    """Before: smc with no --macros ran as plain sa (no macro commit) and the summary said "macros": null."""
    common = ["--split", "test", "--agent", "oracle", "--speculator-model", "noisy-oracle:0.8", "--latency-model", "smc-paper",
              "--limit", "10", "--data-dir", str(tau2_dir)]
    summary = run(capsys, *common, "--mode", "sa,smc")
    assert summary["macros"] == str(SHIPPED)
    assert summary["modes"]["smc"]["commits_macro"] > 0 and summary["modes"]["sa"]["commits_macro"] == 0
    assert run(capsys, *common, "--mode", "sa")["macros"] is None  # no smc: no library loaded


def test_smc_refuses_when_no_library_can_be_found(tau2_dir, capsys, monkeypatch):
    from envs.tau2_telecom.bench import TelecomBench

    monkeypatch.setattr(TelecomBench, "shipped_macros", TelecomBench.shipped_macros.with_name("missing.json"))
    code = main(["run", "--bench", "tau2-telecom", "--solo", "--agent", "oracle", "--mode", "smc", "--speculator-model",
                 "noisy-oracle:0.8", "--limit", "1", "--data-dir", str(tau2_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "mode smc needs --macros FILE" in err and len(err.strip().splitlines()) == 1


def test_a_single_mode_run_has_the_same_shape(tau2_dir, tmp_path, capsys):
    summary = run(capsys, "--split", "small", "--solo", "--agent", "oracle", "--mode", "sequential", "--latency-model", "smc-paper",
                  "--data-dir", str(tau2_dir), "--out", str(tmp_path))
    assert list(summary["modes"]) == ["sequential"] and summary["modes"]["sequential"]["tasks"] == 20
    assert summary["speedup_vs_sequential"] == {"sequential": 1.0} and "reward_mean" not in summary
    assert json.loads((tmp_path / "results.json").read_text())["summary"]["modes"] == summary["modes"]
