"""What a user trips over on the command line: listing tasks, flag help, bad numbers and files, dead endpoints,
local model names for any role, and a readable timeline (issue 13)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from scripted_openai_server import ScriptedFailure, ScriptedOpenAIServer

from agentspec.cli import build_parser, main
from agentspec.errors import ConfigError
from agentspec.roles import plan_roles
from agentspec.run_spec import RunSpec

AIRPLANE = "[service_issue]airplane_mode_on[PERSONA:None]"
NOT_UTF8 = b'[{"requestor": "user", "name": "\xff\xfe"}]'


def call(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code, err, message):
    assert code == 2, err
    assert message in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


# --------------------------------------------------------------------------- agentspec tasks


def test_tasks_lists_ids_one_per_line_or_as_json(tau2_dir, capsys, bench):
    code, out, _ = call(capsys, "tasks", "--bench", "tau2-telecom", "--split", "small", "--data-dir", str(tau2_dir))
    assert code == 0 and out.splitlines() == [task.id for task in bench.tasks("small")]
    code, out, _ = call(capsys, "tasks", "--bench", "tau2-telecom", "--data-dir", str(tau2_dir), "--json")
    ids = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and ids == [task.id for task in bench.tasks("base")] and len(ids) == 114  # default split: base
    code, _, err = call(capsys, "tasks", "--bench", "tau2-telecom", "--split", "nope", "--data-dir", str(tau2_dir))
    assert_one_line_error(code, err, "unknown split")


# --------------------------------------------------------------------------- help


@pytest.mark.parametrize("command", ["run", "mine"])
def test_role_flag_help_reads_as_one_sentence(command):
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    roles = {f"--{role}-{what}" for role in ("agent", "user", "speculator") for what in ("model", "base-url")}
    helps = {o: a.help for a in sub.choices[command]._actions for o in a.option_strings if o in roles}
    assert "--speculator-model" in helps and "--speculator-base-url" in helps
    for flag, text in helps.items():
        assert text[0].isupper() and text.endswith(".") and text.count(". ") == 0, (flag, text)
        if flag.endswith("-model"):
            # "Whose model: choices."; the colons of a value's syntax (noisy-oracle:P, learned:FILE) are no clause.
            syntax = text.count("noisy-oracle:") + text.count("learned:")
            assert text.count(":") - syntax == 1, (flag, text)


# --------------------------------------------------------------------------- numbers


RUN = ["run", "--bench", "tau2-telecom", "--agent", "oracle", "--no-progress"]
SPEC = [*RUN, "--mode", "sa", "--speculator-model", "noisy-oracle:0.8"]


@pytest.mark.parametrize(("argv", "flag"), [
    ([*RUN, "--limit", "-1"], "--limit"),
    ([*RUN, "--limit", "0"], "--limit"),
    ([*SPEC, "--limit", "-1"], "--limit"),  # ran 113 of 114 tasks
    ([*SPEC, "--limit", "0"], "--limit"),  # KeyError: 'mean_task_wall_s'
    ([*RUN, "--mode", "sequential", "--trials", "0"], "--trials"),  # KeyError: 'mean_task_wall_s'
    ([*SPEC, "--concurrency", "0"], "--concurrency"),  # accepted
    ([*RUN, "--max-steps", "-5"], "--max-steps"),  # accepted
    ([*RUN, "--max-errors", "0"], "--max-errors"),
    ([*RUN, "--temperature", "-1"], "--temperature"),
    ([*RUN, "--temperature", "inf"], "--temperature"),
    ([*SPEC, "--depth", "0"], "--depth"),
    ([*SPEC, "--l-min", "-1"], "--l-min"),
    ([*SPEC, "--seed", "x"], "--seed"),
    ([*SPEC, "--gate", "1.5"], "--gate"),
    ([*SPEC, "--probe-every", "0"], "--probe-every"),
    ([*SPEC, "--probe-accuracy", "-0.1"], "--probe-accuracy"),
    (["serve", "--model", "smollm2-135m", "--port", "70000"], "--port"),
    (["serve", "--model", "smollm2-135m", "--max-tokens", "0"], "--max-tokens"),
])
def test_every_numeric_flag_is_checked_with_one_message(tau2_dir, capsys, argv, flag):
    code, out, err = call(capsys, *argv, *(["--data-dir", str(tau2_dir)] if argv[0] == "run" else []))
    assert_one_line_error(code, err, f"argument {flag}: must be ")
    assert out == ""


def test_other_usage_mistakes_are_one_line_too(capsys):
    code, _, err = call(capsys, "run", "--bench")
    assert_one_line_error(code, err, "--bench: expected one argument")
    code, _, err = call(capsys, "run", "--bench", "tau2-telecom", "--agent", "robot")
    assert_one_line_error(code, err, "invalid choice")


# --------------------------------------------------------------------------- files and URLs


@pytest.mark.parametrize("kind", ["actions", "batch", "macros", "baseline"])
def test_a_file_that_is_not_utf8_is_a_one_line_error(tau2_dir, tmp_path, capsys, kind):
    bad = tmp_path / "bad.json"
    bad.write_bytes(NOT_UTF8)
    argv = {
        "actions": ["evaluate", "--bench", "tau2-telecom", "--task-id", AIRPLANE, "--actions", str(bad)],
        "batch": ["evaluate", "--bench", "tau2-telecom", "--batch", str(bad)],
        "macros": [*RUN, "--mode", "smc", "--speculator-model", "noisy-oracle:0.8", "--limit", "1", "--macros", str(bad)],
        "baseline": [*SPEC, "--limit", "1", "--baseline", str(bad)],
    }[kind]
    code, _, err = call(capsys, *argv, "--data-dir", str(tau2_dir))
    assert_one_line_error(code, err, "is not UTF-8 text")


@pytest.mark.parametrize("mode", [[], ["--mode", "sequential"]])
def test_out_naming_a_file_is_a_one_line_error(tau2_dir, tmp_path, capsys, mode):
    taken = tmp_path / "taken"
    taken.write_text("mine")
    for out in (taken, taken / "sub"):
        code, _, err = call(capsys, *RUN, *mode, "--limit", "1", "--out", str(out), "--data-dir", str(tau2_dir))
        assert_one_line_error(code, err, "is a file, not a folder")
    assert taken.read_text() == "mine"


@pytest.mark.parametrize("flag", ["--timeline", "--macros-out"])
def test_a_speculative_output_file_under_a_file_is_a_one_line_error(tau2_dir, tmp_path, capsys, flag):
    (tmp_path / "taken").write_text("mine")
    code, _, err = call(capsys, *SPEC, "--limit", "1", flag, str(tmp_path / "taken" / "x.png"), "--data-dir", str(tau2_dir))
    assert_one_line_error(code, err, "is a file, not a folder")


def test_mine_runs_folder_with_a_non_utf8_results_file_is_a_one_line_error(tau2_dir, tmp_path, capsys):
    (tmp_path / "results.json").write_bytes(NOT_UTF8)
    code, _, err = call(capsys, "mine", "--bench", "tau2-telecom", "--speculator-model", "noisy-oracle:0.8", "--runs",
                        str(tmp_path), "--out", str(tmp_path / "lib.json"), "--no-progress", "--data-dir", str(tau2_dir))
    assert_one_line_error(code, err, "is not UTF-8 text")


@pytest.mark.parametrize("mode", [[], ["--mode", "sequential"]])
def test_an_unparsable_endpoint_url_is_a_one_line_error(tau2_dir, capsys, mode):
    code, _, err = call(capsys, "run", "--bench", "tau2-telecom", "--solo", "--agent-model", "http://[::1", *mode,
                        "--limit", "1", "--no-progress", "--data-dir", str(tau2_dir))
    assert_one_line_error(code, err, "is not a valid URL")


# --------------------------------------------------------------------------- a dead endpoint


@pytest.mark.parametrize("mode", [[], ["--mode", "sequential"]])
def test_an_endpoint_answering_501_to_everything_exits_2(tau2_dir, tmp_path, capsys, mode):
    """Before: /models answered, every chat got 501, and the run exited 0 with terminations {"None": 1}."""
    failing = ScriptedFailure(status=501, times=None, message="Not Implemented here")
    with ScriptedOpenAIServer(failing) as srv:
        code, out, err = call(capsys, "run", "--bench", "tau2-telecom", "--task-ids", AIRPLANE, "--solo", "--agent-model",
                              f"{srv.base_url}#scripted-model", *mode, "--no-progress", "--out", str(tmp_path),
                              "--data-dir", str(tau2_dir))
    assert_one_line_error(code, err, "HTTP 501")
    assert "Not Implemented here" in err and out == ""
    if not mode:  # without --mode the run is sequential: its failed episodes are recorded first
        assert "all 1 episode(s) failed on the model endpoint" in err
        results = json.loads((tmp_path / "results.json").read_text())
        assert results["summary"]["modes"]["sequential"]["terminations"] == {"error": 1}


# --------------------------------------------------------------------------- local model names for any role


def namespace(**flags):
    """The roles' flags as the spec every entry point builds (plan_roles takes a RunSpec only)."""
    return RunSpec(**flags)


def test_roles_naming_one_local_model_share_one_embedded_server():
    plan = plan_roles(namespace(agent_model="qwen2.5-coder-0.5b", speculator_model="qwen2.5-coder-0.5b",
                                user_model="smollm2-135m"), {"agent": None, "user": None, "speculator": None}, env={})
    assert plan.embedded == {"agent": "qwen2.5-coder-0.5b", "user": "smollm2-135m", "speculator": "qwen2.5-coder-0.5b"}
    assert plan.served_models == ["qwen2.5-coder-0.5b", "smollm2-135m"] and plan.endpoints == {}


def test_a_local_name_with_an_endpoint_is_a_name_at_that_endpoint():
    plan = plan_roles(namespace(agent_model="qwen2.5-coder-0.5b", agent_base_url="http://gpu:8000/v1"), {"agent": None},
                      env={})
    assert plan.embedded == {} and plan.endpoints["agent"].model == "qwen2.5-coder-0.5b"
    assert plan_roles(namespace(agent_model="qwen2.5-coder-0.5b"), {"agent": None},
                      env={"OPENAI_BASE_URL": "http://gpu:8000/v1"}).endpoints["agent"].base_url == "http://gpu:8000/v1"
    with pytest.raises(ConfigError, match="no endpoint for the agent model"):
        plan_roles(namespace(agent_model="not-a-local-model"), {"agent": None}, env={})
    assert plan_roles(namespace(), {"agent": "qwen2.5-coder-0.5b", "user": None}, env={}).embedded == {
        "agent": "qwen2.5-coder-0.5b"}


def test_spork_with_a_local_agent_name_serves_it_embedded(tau2_dir, tmp_path, capsys, monkeypatch):
    """Before: `--mode spork --agent-model qwen2.5-coder-0.5b` stopped with "no endpoint for the agent model".

    The real child server runs; a tiny random model folder stands in for the Qwen weights (minutes on the CPU),
    the way tests/test_embedded.py does, and the test records which models the run asked it to serve.
    """
    from local_models import tiny_model

    from agentspec.models import embedded

    tiny = str(tiny_model(tmp_path / "tiny"))
    started: list[list[str]] = []
    real = functools.partial(embedded.embedded_server, max_tokens=8)

    @asynccontextmanager
    async def recording(models, **options):
        started.append(list(models))
        assert options == {"decoder": "toolspec"}  # a run's local models decode with ToolSpec (greedy-identical)
        async with real([tiny], **options) as served:
            yield dataclasses.replace(served, model_ids={name: served.model_ids[tiny] for name in models})

    monkeypatch.setattr(embedded, "embedded_server", recording)
    for variable in ("AGENTSPEC_AGENT_MODEL", "AGENTSPEC_AGENT_BASE_URL", "AGENTSPEC_SPECULATOR_MODEL",
                     "AGENTSPEC_SPECULATOR_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    code, out, err = call(capsys, "run", "--json", "--bench", "tau2-telecom", "--task-ids", AIRPLANE, "--solo", "--mode", "sa+spork",
                          "--agent-model", "qwen2.5-coder-0.5b", "--speculator-model", "qwen2.5-coder-0.5b",
                          "--max-steps", "3", "--no-progress", "--data-dir", str(tau2_dir))
    assert "no endpoint" not in err
    assert started == [["qwen2.5-coder-0.5b"]]  # one server for both roles
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["modes"]["sa+spork"]["episodes"] == 1


# --------------------------------------------------------------------------- the timeline


def test_timeline_of_a_long_task_is_readable(tau2_dir, tmp_path, capsys):
    from agentspec.report.timeline import LANE_NAMES, draw_timeline, wrap_title

    long_task = ("[mms_issue]airplane_mode_on|bad_network_preference|bad_wifi_calling|break_apn_mms_setting|"
                 "break_app_sms_permission|data_mode_off|data_usage_exceeded|unseat_sim_card|"
                 "user_abroad_roaming_disabled_on[PERSONA:None]")
    code, _, err = call(capsys, "run", "--bench", "tau2-telecom", "--task-ids", long_task, "--solo", "--agent", "oracle", "--mode", "smc",
                        "--speculator-model", "noisy-oracle:0.8", "--latency-model", "smc-paper", "--no-progress",
                        "--out", str(tmp_path), "--timeline", str(tmp_path / "t.png"), "--data-dir", str(tau2_dir))
    assert code == 0, err
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    episode = json.loads((tmp_path / "results.json").read_text())["episodes"]["smc"][0]
    events = episode["execution"]["timeline"]
    assert len(events) >= 20

    fig = draw_timeline(events, f"{long_task} (smc)")
    renderer = fig.canvas.get_renderer()
    [ax] = fig.axes
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {LANE_NAMES["authority"], LANE_NAMES["speculator"], "commit: speculative action (SA)",
            "commit: macro step (SMC)"} <= set(legend)
    title = ax._left_title  # set_title(loc="left")
    assert title.get_text() == wrap_title(f"{long_task} (smc)") and title.get_text().count("\n") >= 1
    assert title.get_window_extent(renderer).x1 <= fig.bbox.x1  # not cut at the right edge
    shown = [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
    assert any(t.get_text() == "toggle_airplane_mode" for t in shown)
    assert any(t.get_text().endswith("…") for t in shown)  # long labels in short bars are shortened, not spilled
    boxes = [t.get_window_extent(renderer) for t in shown]
    overlapping = [(a.get_text(), b.get_text()) for i, a in enumerate(shown) for j, b in enumerate(shown)
                   if i < j and boxes[i].overlaps(boxes[j])]
    assert overlapping == []


def test_wrap_title_breaks_long_ids_at_bars():
    from agentspec.report.timeline import wrap_title

    text = "[mms_issue]" + "|".join(f"issue_number_{i}" for i in range(12)) + "[PERSONA:None]"
    lines = wrap_title(text, width=60).splitlines()
    assert "".join(lines) == text and all(len(line) <= 60 for line in lines) and len(lines) > 2
    assert all(line.endswith(("|", "]")) for line in lines[:-1])


def test_library_path_in_summary_is_a_path(tau2_dir, capsys):
    code, out, err = call(capsys, *RUN, "--mode", "smc", "--speculator-model", "noisy-oracle:0.8", "--limit", "1",
                          "--data-dir", str(tau2_dir), "--json")
    assert code == 0, err
    assert Path(json.loads(out.strip().splitlines()[-1])["macros"]).is_file()


# --------------------------------------------------------------------------- output paths nobody can write (issue 26, 14)


@pytest.mark.parametrize("argv", [
    ["run", "--bench", "tau2-telecom", "--agent", "oracle", "--mode", "sequential", "--limit", "1", "--out", "/proc/x"],
    ["run", "--bench", "tau2-telecom", "--agent", "oracle", "--limit", "1", "--out", "/proc/x"],  # tau2's own loop
    [*SPEC, "--limit", "1", "--timeline", "/proc/x/t.png"],
    [*SPEC, "--limit", "1", "--macros-out", "/proc/x/m.json"],
    [*SPEC, "--limit", "1", "--record", "/proc/x"],
    ["report", ".", "--out", "/proc/x/r.html"],
    ["mine", "--bench", "tau2-telecom", "--speculator-model", "noisy-oracle:0.8", "--out", "/proc/x/m.json"],
], ids=["run-out", "plain-run-out", "timeline", "macros-out", "record", "report-out", "mine-out"])
def test_an_output_path_that_cannot_be_written_is_a_one_line_error(tau2_dir, capsys, argv):
    code, _, err = call(capsys, *argv, *(["--data-dir", str(tau2_dir)] if argv[0] != "report" else []))
    assert_one_line_error(code, err, "cannot write in /proc/x")
