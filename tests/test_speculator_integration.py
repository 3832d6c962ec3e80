"""The learned speculator where users meet it: the Python API (``Executor`` with ``"learned:FILE"``,
``spec_width``, ``governor``), the plain tau2 run's ``data_verified`` in results.json, and ``agentspec speculator``
on custom (``--unverified-data``) tau2 data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
import pytest
from trio.testing import MockClock

from agentspec import ConfigError, Executor, Toolkit, tool
from agentspec.api import DEFAULT_PROMPT
from agentspec.cli import main
from agentspec.data import sha256_file
from agentspec.learned_speculator.artifact import Artifact, FittedOn, inputs_digest
from agentspec.learned_speculator.fit import fit
from agentspec.learned_speculator.trajectories import Trajectory
from agentspec.normalize import Normalizer, patterns_from_table
from agentspec.runtime.policies.scripted import OracleAuthority
from agentspec.types import ToolCall
from envs.tau2_telecom.dataset import TAU2_DATA

PATTERNS = [("account", r"A\d{4,}", None)]


class Desk(Toolkit):
    """A help desk: look a customer up by phone, refund their account, note it; a gold member gets a voucher."""

    def __init__(self, accounts: dict[str, str]) -> None:
        self.accounts = accounts
        self.done: list[str] = []

    @tool("read_only")
    def lookup(self, phone_number: str) -> dict[str, str]:
        """Find a customer's account by phone number."""
        return {"account": self.accounts[phone_number], "tier": "basic"}

    @tool("mutating")
    def refund(self, account: str, amount: float) -> str:
        """Refund an account."""
        self.done.append(f"refund {account} {amount}")
        return "Refunded."

    @tool("mutating")
    def note(self, account_ref: str, kind: str) -> str:
        """Write a note on an account."""
        self.done.append(f"note {account_ref} {kind}")
        return "Noted."

    @tool("mutating")
    def voucher(self, account: str) -> str:
        """Send a voucher."""
        self.done.append(f"voucher {account}")
        return "Sent."


def ticket(number: int, *, gold: bool) -> tuple[str, dict[str, str], list[ToolCall]]:
    """Task ``number``: its text, the desk's accounts, and its reference calls."""
    phone, account = f"555-010-{1000 + number}", f"A{5000 + number}"
    text = f"Customer at {phone} wants a refund." + (" They are a gold member." if gold else "")
    calls = [ToolCall(name="lookup", arguments={"phone_number": phone}),
             ToolCall(name="refund", arguments={"account": account, "amount": 20.0}),
             ToolCall(name="note", arguments={"account_ref": account, "kind": "refund"})]
    if gold:
        calls.append(ToolCall(name="voucher", arguments={"account": account}))
    return text, {phone: account}, calls


def prompt(text: str) -> str:
    """What the Executor's learned speculator reads: the prompt it gives the authority."""
    return f"{DEFAULT_PROMPT}\n\nTask: {text}"


@pytest.fixture(scope="module")
def speculator_file(tmp_path_factory) -> Path:
    """A speculator fitted on eight tickets played on the real toolkit (its real observations)."""
    trajectories = []
    for number in range(8):
        text, accounts, calls = ticket(number, gold=number % 2 == 0)
        desk = Desk(accounts)
        steps = tuple((call, desk.run(call, "assistant")) for call in calls)
        trajectories.append(Trajectory(f"ticket{number}", prompt(text), steps, "api-test"))
    model = fit(trajectories, Normalizer(patterns_from_table(PATTERNS)), PATTERNS, [])
    artifact = Artifact(fitted_on=FittedOn(sources=["api-test"], task_ids=[t.task_id for t in trajectories],
                                           trajectories=len(trajectories), calls=sum(len(t.steps) for t in trajectories),
                                           inputs_sha256=inputs_digest(trajectories)), model=model)
    path = tmp_path_factory.mktemp("spec") / "spec.json"
    artifact.save(path)
    return path


def play(mode: str, speculator: object, **options):
    """A held-out gold-member ticket through the Executor on trio's virtual clock, the oracle as authority."""
    text, accounts, calls = ticket(42, gold=True)
    desk = Desk(accounts)
    authority = OracleAuthority([*calls, ToolCall(name="done", arguments={"answer": "refunded"})])
    executor = Executor(desk, authority=authority, speculator=speculator, mode=mode, latency="smc-paper", **options)
    result = anyio.run(executor.run, text, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})
    return result, calls, executor.backend.live.toolkit


def test_the_executor_runs_a_learned_speculator_faster_with_the_same_outcome(speculator_file: Path) -> None:
    sequential, calls, desk = play("sequential", None)
    sa, _, sa_desk = play("sa", f"learned:{speculator_file}")
    assert [s.call for s in sa.steps] == [s.call for s in sequential.steps] == calls
    assert sa.answer == sequential.answer == "refunded" and sa_desk.done == desk.done
    # The learned speculator named every call before the authority did: each committed from its fork.
    assert [s.source for s in sa.steps] == ["sa"] * len(calls)
    assert sa.metrics["wall_s"] < sequential.metrics["wall_s"]  # its forks hid the tools' time
    # Under the governor by default, named by its flag value, and not paused: it costs the authority nothing.
    report = sa.governor[f"learned:{speculator_file}"]
    assert report["paused"] is False and report["saving_s"] > 0
    assert sequential.governor is None


def test_spec_width_runs_the_ranked_alternatives_in_forks(speculator_file: Path) -> None:
    narrow, _, _ = play("sa", f"learned:{speculator_file}")
    wide, calls, desk = play("sa", f"learned:{speculator_file}", spec_width=3)
    assert narrow.metrics["alternative_tool_calls"] == 0
    assert wide.metrics["alternative_tool_calls"] > 0
    # Every effect applied once, in order: no alternative's fork reached the live desk.
    assert [s.call for s in wide.steps] == calls
    assert desk.done == ["refund A5042 20.0", "note A5042 refund", "voucher A5042"]


def test_without_the_governor_there_is_no_report(speculator_file: Path) -> None:
    result, calls, _ = play("sa", f"learned:{speculator_file}", governor=False)
    assert result.governor is None and [s.call for s in result.steps] == calls


class Abstains:
    """A speculator that never guesses (a model that answered text, no call; a bare "no call" predicts the end)."""

    async def decide(self, history):
        from agentspec import Decision

        return Decision(call=None, text="I cannot tell")


def test_a_list_of_speculators_is_asked_in_turn_under_one_governor(speculator_file: Path) -> None:
    learned = f"learned:{speculator_file}"
    result, calls, _ = play("sa", [Abstains(), learned])
    assert [s.call for s in result.steps] == calls
    assert [s.source for s in result.steps] == ["sa"] * len(calls)  # the learned one answered where the first abstained
    assert list(result.governor) == ["Abstains", learned]
    assert result.governor[learned]["saving_s"] > 0 and result.governor["Abstains"]["saving_s"] == 0


@pytest.mark.parametrize(("speculator", "message"), [
    ("learned", "agentspec speculator fit"),
    ("learned:/nonexistent/spec.json", "cannot read speculator"),
    ("qwen2.5-coder-0.5b", "ModelConfig"),
])
def test_a_bad_learned_speculator_fails_when_the_executor_is_made(speculator: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Executor(Desk({}), authority=OracleAuthority([]), speculator=speculator, mode="sa")


def test_agentspec_run_takes_the_learned_speculator_width_and_governor(tau2_dir, tau2_speculator) -> None:
    """``agentspec.run(RunSpec(...))``, the API every entry point shares, with the issue's settings."""
    from agentspec import RunSpec, run

    def outcome(**options):
        spec = RunSpec.of(bench="tau2-telecom", data_dir=str(tau2_dir), split="test", limit=2, solo=True,
                          agent="oracle", speculator_model=f"learned:{tau2_speculator}", modes="sequential,sa",
                          latency_model="smc-paper", progress=False, **options)
        return run(spec)  # the run's Results

    wide, ungoverned = outcome(spec_width=3), outcome(governor=False)
    for results in (wide, ungoverned):
        assert [e.reward for e in results.episodes["sa"]] == [e.reward for e in results.episodes["sequential"]] == [1.0] * 2
    alternatives = [(e.execution or {})["metrics"]["alternative_tool_calls"] for e in wide.episodes["sa"]]
    assert sum(alternatives) > 0
    assert sum((e.execution or {})["metrics"]["alternative_tool_calls"] for e in ungoverned.episodes["sa"]) == 0
    # Its look-ahead ran in forks and is counted per episode and per mode (sequential has no speculator).
    looked = [(e.execution or {})["metrics"]["lookahead_calls"] for e in wide.episodes["sa"]]
    batches = [(e.execution or {})["metrics"]["lookahead_batches"] for e in wide.episodes["sa"]]
    sa, sequential = wide.summary.modes["sa"].as_dict(), wide.summary.modes["sequential"].as_dict()
    assert all(n > 0 for n in looked) and sa["lookahead_calls"] == sum(looked) >= sa["lookahead_batches"] == sum(batches) > 0
    assert sequential["lookahead_calls"] == sequential["lookahead_batches"] == 0
    governor = wide.summary.modes["sa"].governor
    assert governor is not None and list(governor) == [f"learned:{tau2_speculator}"]
    assert ungoverned.summary.modes["sa"].governor is None and wide.summary.modes["sequential"].governor is None


# --------------------------------------------------------------------------- custom tau2 data


@pytest.fixture(scope="module")
def renamed(tau2_dir, tmp_path_factory) -> tuple[Path, list[str]]:
    """A copy of the tau2 data with the test split's first two tasks renamed (in the tasks and the splits), and a
    split ``custom`` of just those two."""
    from agentspec.bench.registry import open_bench

    folder = tmp_path_factory.mktemp("tau2-custom")
    for rel in TAU2_DATA.files:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tau2_dir / rel, folder / rel)
    old = [task.id for task in open_bench("tau2-telecom", tau2_dir).tasks("test", limit=2)]
    new = [f"custom_ticket_{i}" for i in range(len(old))]
    for rel in ("telecom/tasks.json", "telecom/split_tasks.json"):
        path = folder / rel
        text = path.read_text(encoding="utf-8")
        for before, after in zip(old, new, strict=True):
            text = text.replace(json.dumps(before), json.dumps(after))
        path.write_text(text, encoding="utf-8")
    splits = json.loads((folder / "telecom/split_tasks.json").read_text(encoding="utf-8"))
    splits["custom"] = new  # a split of one's own, as custom data may bring
    (folder / "telecom/split_tasks.json").write_text(json.dumps(splits), encoding="utf-8")
    return folder, new


@pytest.fixture(scope="module")
def tau2_speculator(bench, tmp_path_factory) -> Path:
    """A speculator fitted on a few train tasks of the pinned release (what `speculator fit` fits with)."""
    from agentspec.learned_speculator.command import fit_bench

    artifact = anyio.run(lambda: fit_bench(bench, bench.tasks("train", limit=4), split="train"))
    path = tmp_path_factory.mktemp("tau2-spec") / "spec.json"
    artifact.save(path)
    return path


def test_speculator_score_on_renamed_data_needs_the_flag_and_says_unverified(renamed, tau2_speculator, capsys):
    folder, ids = renamed
    score = ["speculator", "score", "--bench", "tau2-telecom", "--split", "test", "--limit", "2",
             "--speculator", str(tau2_speculator), "--data-dir", str(folder)]
    assert main(score) == 2
    assert "fails its hash check" in capsys.readouterr().err
    assert main([*score, "--unverified-data"]) == 0
    captured = capsys.readouterr()
    line = json.loads(captured.out.strip().splitlines()[-1])
    assert line["tasks"] == len(ids) and line["steps"] > 0 and 0 <= line["exact_at_1"] <= 1
    assert line["data_verified"] is False
    assert line["data_sha256"]["telecom/tasks.json"] == sha256_file(folder / "telecom" / "tasks.json")
    assert sum("unverified" in err for err in captured.err.splitlines()) == 1


def test_speculator_fit_on_custom_data_with_the_flag_says_unverified(renamed, tmp_path, capsys):
    folder, ids = renamed
    out = tmp_path / "spec.json"
    fit = ["speculator", "fit", "--bench", "tau2-telecom", "--split", "custom", "--data-dir", str(folder),
           "--out", str(out)]
    assert main(fit) == 2 and not out.exists()
    assert "--unverified-data" in capsys.readouterr().err
    assert main([*fit, "--unverified-data"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["trajectories"] == len(ids) and line["data_verified"] is False
    assert line["data_sha256"]["telecom/tasks.json"] == sha256_file(folder / "telecom" / "tasks.json")
    assert json.loads(out.read_text(encoding="utf-8"))["fitted_on"]["task_ids"] == sorted(ids)


def test_a_run_without_mode_writes_data_verified_into_results_json(renamed, tmp_path, capsys):
    folder, ids = renamed
    out = tmp_path / "out"
    assert main(["run", "--json", "--bench", "tau2-telecom", "--task-ids", ids[0], "--agent", "oracle", "--data-dir", str(folder),
                 "--unverified-data", "--out", str(out), "--no-progress"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    summary = json.loads((out / "results.json").read_text(encoding="utf-8"))["summary"]
    assert summary["data_verified"] is printed["data_verified"] is False
    assert summary["data_sha256"] == printed["data_sha256"]
    assert summary["data_sha256"]["telecom/split_tasks.json"] == sha256_file(folder / "telecom" / "split_tasks.json")
    assert summary["data_sha256"]["telecom/db.toml"] == TAU2_DATA.files["telecom/db.toml"]
    assert summary["modes"]["sequential"]["reward_mean"] == 1.0  # the renamed task ran


# --------------------------------------------------------------------------- review fixes (held-out, online, clock)


def _run_line(tau2_dir, *extra: str) -> list[str]:
    return ["run", "--bench", "tau2-telecom", "--data-dir", str(tau2_dir), "--agent", "oracle", "--solo",
            "--mode", "sequential,sa", "--latency-model", "smc-paper", "--no-progress", *extra]


def test_a_run_on_tasks_the_learned_speculator_was_fitted_on_is_refused(tau2_dir, tau2_speculator, capsys) -> None:
    fitted = json.loads(tau2_speculator.read_text(encoding="utf-8"))["fitted_on"]["task_ids"]
    code = main(_run_line(tau2_dir, "--task-ids", ",".join(fitted[:2]), "--speculator-model", f"learned:{tau2_speculator}"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "2 of the run's 2 tasks" in err and str(tau2_speculator) in err and "--split train" in err


def test_a_learned_speculator_fitted_on_another_bench_is_refused(tau2_dir, tau2_speculator, tmp_path, capsys) -> None:
    data = json.loads(tau2_speculator.read_text(encoding="utf-8"))
    data["fitted_on"]["bench"] = "workspace-demo"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data), encoding="utf-8")
    code = main(_run_line(tau2_dir, "--split", "test", "--limit", "1", "--speculator-model", f"learned:{other}"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "fitted on bench workspace-demo" in err


@pytest.mark.parametrize(("extra", "message"), [
    (["--trials", "2"], "learn a task from its own earlier trial"),
    (["--resume", "--out", "OUT"], "cannot --resume"),
])
def test_learn_online_refuses_trials_and_resume(tau2_dir, tau2_speculator, tmp_path, capsys, extra, message) -> None:
    extra = [str(tmp_path) if e == "OUT" else e for e in extra]
    code = main(_run_line(tau2_dir, "--split", "test", "--limit", "1", "--speculator-model", f"learned:{tau2_speculator}",
                          "--learn-online", *extra))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err


def test_a_further_learned_speculator_gets_its_file_and_its_lookahead(bench, tau2_speculator) -> None:
    from agentspec import RunSpec
    from agentspec.assembly import assemble, mode_governor, resolve_learned
    from agentspec.learned_speculator.runs import model_at

    learned = f"learned:{tau2_speculator}"
    spec = RunSpec.of(bench="tau2-telecom", agent="oracle", solo=True, modes="sa", speculator_model=learned,
                      more_speculators=[learned], latency_model="smc-paper")
    mode, task = spec.modes[0], bench.tasks("test", limit=1)[0]
    parts = assemble(spec, mode, bench, task, {}, solo=True, governor=mode_governor(spec, mode))
    assert len(parts.on_backend) == 2  # each learned member's look-ahead is attached to the episode's backend
    assert resolve_learned(spec, bench) == spec  # nothing plain to fit
    with pytest.raises(ConfigError, match="needs its file"):
        model_at("")  # was "cannot read speculator <cwd>: Is a directory"


def test_identical_virtual_clock_runs_with_a_learned_speculator_time_identically(tau2_dir, tau2_speculator, tmp_path,
                                                                                  capsys) -> None:
    def summary(out: str) -> dict:
        line = _run_line(tau2_dir, "--split", "test", "--limit", "2", "--speculator-model", f"learned:{tau2_speculator}",
                         "--out", str(tmp_path / out))
        assert main(line) == 0
        capsys.readouterr()
        modes = json.loads((tmp_path / out / "results.json").read_text(encoding="utf-8"))["summary"]["modes"]
        for mode in modes.values():
            mode.pop("wall_s")  # the real time the run took; everything else is on the virtual clock
        return modes

    first, second = summary("a"), summary("b")
    assert first["sa"]["mean_task_wall_s"] > 0
    assert first == second  # the speculator's measured predict time (it differs run to run) is not charged


def test_speculator_score_against_a_runs_own_calls(tau2_dir, tau2_speculator, tmp_path, capsys) -> None:
    """``score --runs``: the references are a run's episodes instead of the gold calls.  An oracle run's episodes
    are the gold calls, so the figures are the gold scoring's; a run whose authority made other calls is scored
    against those calls (what a speculator fitted on that authority's runs is for)."""
    assert main(_run_line(tau2_dir, "--split", "test", "--limit", "2", "--mode", "sequential", "--out",
                          str(tmp_path / "oracle"))) == 0
    capsys.readouterr()
    score = ["speculator", "score", "--bench", "tau2-telecom", "--split", "test", "--limit", "2", "--data-dir",
             str(tau2_dir), "--speculator", str(tau2_speculator)]

    def last(extra: list[str]) -> dict:
        assert main([*score, *extra]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    gold, runs = last([]), last(["--runs", str(tmp_path / "oracle")])
    assert runs["reference"] == "runs" and runs["episodes"] == 2
    figures = ("steps", "exact_at_1", "exact_at_3", "name_at_1", "strict_at_1", "chain2", "coverage")
    assert {k: runs[k] for k in figures} == {k: gold[k] for k in figures}

    # Another authority: every episode's calls renamed to a tool the speculator never saw, so no guess is right.
    results = json.loads((tmp_path / "oracle" / "results.json").read_text(encoding="utf-8"))
    for episode in results["episodes"]["sequential"]:
        for message in episode["messages"]:
            for call in message.get("tool_calls") or []:
                call["name"] = "never_fitted_" + call["name"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "results.json").write_text(json.dumps(results), encoding="utf-8")
    other = last(["--runs", str(tmp_path / "other")])
    assert other["steps"] == gold["steps"] and other["exact_at_1"] == other["name_at_1"] == 0.0

    assert main([*score, "--runs", str(tmp_path / "oracle"), "--min-reward", "1.0", "--split", "small"]) == 2
    assert "no episode of the small split" in capsys.readouterr().err
    assert main(["speculator", "score", "--bench", "tau2-telecom", "--split", "test", "--folds", "2", "--runs",
                 str(tmp_path / "oracle"), "--data-dir", str(tau2_dir)]) == 2
    assert "not with --folds" in capsys.readouterr().err
