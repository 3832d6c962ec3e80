"""``results.json``: one model (:class:`agentspec.results.Results`) that every run writes and every reader reads; a
run without ``--mode`` is ``sequential`` mode through the assembly, written in the same schema."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import agentspec
from agentspec.cli import main
from agentspec.errors import ConfigError
from agentspec.results import PLAIN, RESULTS_FORMAT, V1_FORMAT, Results, summarize


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _schema(results: Results) -> tuple[set[str], set[str], set[str]]:
    """The keys of a run's summary, of each mode's figures and of each episode record."""
    dumped = results.dump()
    modes = {key for figures in dumped["summary"]["modes"].values() for key in figures}
    records = {key for records in dumped["episodes"].values() for record in records for key in record}
    return set(dumped["summary"]) - {"run_wall_s"}, modes, records


def test_a_run_without_mode_is_sequential_with_the_same_schema_and_rewards(tau2_dir: Path, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    common = ["run", "--json", "--bench", "tau2-telecom", "--split", "base", "--agent", "oracle", "--data-dir", str(tau2_dir),
              "--no-progress", "--concurrency", "4"]
    plain = _run([*common, "--out", str(tmp_path / "A")], capsys)
    sequential = _run([*common, "--mode", "sequential", "--out", str(tmp_path / "B")], capsys)
    a, b = Results.load(tmp_path / "A"), Results.load(tmp_path / "B" / "results.json")
    assert a.format == b.format == RESULTS_FORMAT and list(a.episodes) == list(b.episodes) == ["sequential"]
    assert _schema(a) == _schema(b)
    rewards = [{r.task_id: r.reward for r in results.episodes["sequential"]} for results in (a, b)]
    assert rewards[0] == rewards[1] and len(rewards[0]) == plain["tasks"] > 0
    assert plain["play"] == sequential["play"] == "normal"  # the user simulator plays its side, as in every mode
    assert plain["modes"]["sequential"]["reward_mean"] == sequential["modes"]["sequential"]["reward_mean"] == 1.0


def test_what_is_written_is_what_is_read(tau2_dir: Path, tmp_path: Path) -> None:
    spec = agentspec.RunSpec.of(bench="tau2-telecom", data_dir=str(tau2_dir), split="test", limit=2, solo=True,
                                agent="oracle", modes="sequential,sa", speculator_model="noisy-oracle:0.8",
                                latency_model="smc-paper", progress=False, out=str(tmp_path))
    results = agentspec.run(spec)  # the API returns the run's results and, with out, writes them
    again = Results.load(tmp_path)
    assert again == results and json.loads((tmp_path / "results.json").read_text()) == results.dump()
    assert again.config["bench"] == "tau2-telecom" and again.config["modes"][1] == {"base": "sa", "spork": False}
    assert set(again.summary.modes) == {"sequential", "sa"} and again.summary.speedup_vs_sequential is not None
    figures = summarize(again.records("sa"), 1.0)
    assert again.summary.modes["sa"].reward_mean == figures["reward_mean"] == 1.0


class _Answers:
    """A bench's own output format (:class:`agentspec.bench.protocol.OfficialOutputs`): one line per task."""

    def write_outputs(self, out: Path, records: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Path]:
        written = []
        for mode, episodes in records.items():
            path = out / f"answers-{mode}.txt"
            path.write_text("".join(f"{r['task_id']} {r['reward']}\n" for r in episodes), encoding="utf-8")
            written.append(path)
        return written


def _results(modes: dict[str, list[dict[str, Any]]]) -> Results:
    summary = {"bench": "toy", "modes": {mode: summarize(records, 0.5) for mode, records in modes.items()}}
    return Results.of({"bench": "toy"}, summary, modes)


def test_the_writer_writes_the_benchs_own_formats_and_lists_them(tmp_path: Path) -> None:
    results = _results({"sequential": [{"task_id": "t1", "reward": 1.0}, {"task_id": "t2", "reward": 0.0}]})
    results.save(tmp_path, _Answers())
    assert (tmp_path / "answers-sequential.txt").read_text() == "t1 1.0\nt2 0.0\n"
    assert Results.load(tmp_path).summary.official_outputs == [str(tmp_path / "answers-sequential.txt")]
    results.save(tmp_path / "plain", object())  # a bench without its own formats: results.json alone
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == ["results.json"]


def _v1_plain(tmp_path: Path, task_ids: tuple[str, str] = ("t1", "t2")) -> Path:
    records = [{"task_id": task_ids[0], "trial": 0, "reward": 1.0, "timings": {"wall_s": 2.0}},
               {"task_id": task_ids[1], "trial": 0, "reward": 0.0, "timings": {"wall_s": 4.0}}]
    summary = {"bench": "tau2-telecom", "split": "base", "agent": "oracle", **summarize(records, 6.0),
               "data_verified": True}
    (tmp_path / "results.json").write_text(json.dumps({"format": V1_FORMAT, "summary": summary, "episodes": records}))
    return tmp_path


def test_a_plain_run_of_the_previous_format_reads_as_one_mode(tmp_path: Path) -> None:
    results = Results.load(_v1_plain(tmp_path))
    assert list(results.episodes) == [PLAIN] and results.summary.bench == "tau2-telecom"
    figures = results.summary.modes[PLAIN]
    assert figures.reward_mean == 0.5 and figures.mean_task_wall_s == 3.0 and figures.tasks == 2
    assert results.summary.as_dict()["data_verified"] is True  # the run's settings stay at the top


def test_a_mode_run_of_the_previous_format_reads_as_it_is(tmp_path: Path) -> None:
    current = _results({"sa": [{"task_id": "t1", "reward": 1.0}]}).dump()
    for version in (V1_FORMAT, None):  # None: written before the format key existed
        old = {k: v for k, v in current.items() if k not in ("config", "format")} | ({"format": version} if version else {})
        (tmp_path / "results.json").write_text(json.dumps(old))
        assert Results.load(tmp_path).episodes["sa"][0].reward == 1.0


@pytest.mark.parametrize("content, message", [
    ({"format": "agentspec.results/v0", "summary": {}, "episodes": {}}, "format 'agentspec.results/v0' is not one"),
    ({"summary": {"bench": "x"}, "episodes": 7}, "no format key; agentspec.results/v2 expected"),
    ({"format": V1_FORMAT, "summary": {"bench": "x"}, "episodes": []}, "format agentspec.results/v1; agentspec"),
    ({"format": RESULTS_FORMAT, "summary": {"bench": "x", "modes": {"sa": {}}}, "episodes": {}}, "does not match"),
    ([1, 2], "a JSON object is expected"),
])
def test_a_file_it_cannot_read_is_one_line_naming_the_file_and_format(tmp_path: Path, content: Any, message: str) -> None:
    (tmp_path / "results.json").write_text(json.dumps(content))
    with pytest.raises(ConfigError) as caught:
        Results.load(tmp_path)
    assert str(tmp_path / "results.json") in str(caught.value) and message in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


def test_a_folder_without_results_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no results.json here"):
        Results.load(tmp_path)
    with pytest.raises(ConfigError, match="no such folder or file"):
        Results.load(tmp_path / "missing")


def test_baseline_reads_a_previous_format_plain_run(tau2_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "old").mkdir()
    from agentspec.bench.registry import open_bench

    first, second = (task.id for task in open_bench("tau2-telecom", tau2_dir).tasks("test", limit=2))
    baseline = _v1_plain(tmp_path / "old", (first, second))  # a baseline of the same tasks (others are refused)
    summary = _run(["run", "--json", "--bench", "tau2-telecom", "--split", "test", "--limit", "2", "--solo", "--agent", "oracle",
                    "--mode", "sequential", "--data-dir", str(tau2_dir), "--no-progress", "--baseline", str(baseline)],
                   capsys)
    assert summary["vs_baseline"]["baseline_mode"] == PLAIN and summary["vs_baseline"]["baseline_mean_task_wall_s"] == 3.0
