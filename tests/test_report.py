"""``agentspec report`` and ``agentspec run --report``: the page holds the run's figures, renders in a real
browser, refers to nothing outside itself, and bad input is one line with exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from sandbox_support import unavailable

from agentspec.cli import main
from agentspec.results import RESULTS_FORMAT

MODES = ["sequential", "sa", "smc"]
SUMMARY_KEYS = ["reward_mean", "mean_task_wall_s", "p50_wall_s", "p95_wall_s", "authority_calls", "authority_skipped",
                "commits_sa", "commits_macro", "commits_spork", "reused_read_only", "live_executions",
                "wasted_tool_calls", "wasted_tokens", "episodes"]


class _Page(HTMLParser):
    """Collects what the tests read back: tagged figures, hover titles, every URL-bearing attribute, tags."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.figures: dict[tuple[str, str, str], str] = {}
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self.titles: list[str] = []
        self.ids: set[str] = set()
        self.task_summaries: list[str] = []
        self._in: str | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        if "id" in a:
            self.ids.add(str(a["id"]))
        if "data-key" in a:
            self.figures[(str(a["data-run"]), str(a["data-mode"]), str(a["data-key"]))] = str(a["data-value"])
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "action", "srcset", "poster", "data") or "url(" in str(value):
                self.urls.append(str(value))
        if tag in ("title", "summary"):
            self._in, self._text = tag, ""

    def handle_data(self, data: str) -> None:
        if self._in:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in:
            (self.titles if tag == "title" else self.task_summaries).append(self._text)
            self._in = None


def _local(url: str) -> bool:
    """A reference inside the page: ``#id`` or ``url(#id)`` (matplotlib's clip paths)."""
    return url.startswith("#") or url.startswith("url(#")


def _read(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any] | None, str]:
    code = main(args)
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    return code, json.loads(lines[-1]) if code == 0 and lines else None, err


@pytest.fixture(scope="module")
def modes_run(tau2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small virtual-clock run of three modes, written with --report (about a second)."""
    out = tmp_path_factory.mktemp("report") / "modes"
    code = main(["run", "--bench", "tau2-telecom", "--split", "test", "--limit", "4", "--solo", "--agent", "oracle",
                 "--mode", ",".join(MODES), "--speculator-model", "noisy-oracle:0.8", "--latency-model", "smc-paper",
                 "--data-dir", str(tau2_dir), "--out", str(out), "--report", "--no-progress"])
    assert code == 0
    return out


def test_run_report_holds_the_figures_of_results_json(modes_run: Path) -> None:
    results = json.loads((modes_run / "results.json").read_text(encoding="utf-8"))
    assert results["format"] == RESULTS_FORMAT
    page = _read(modes_run / "report.html")
    summary = results["summary"]
    for mode in MODES:
        figures = summary["modes"][mode]
        for key in SUMMARY_KEYS:
            assert float(page.figures[("modes", mode, key)]) == pytest.approx(figures[key]), (mode, key)
        for k, value in figures["pass_hat_k"].items():
            assert float(page.figures[("modes", mode, f"pass_hat_k.{k}")]) == pytest.approx(value)
        assert float(page.figures[("modes", mode, "speedup_vs_sequential")]) == pytest.approx(
            summary["speedup_vs_sequential"][mode], abs=1e-4)
    # Every task has its section, and a speculative mode's commits are counted by chain depth.
    task_ids = {e["task_id"] for e in results["episodes"]["smc"]}
    assert len(page.task_summaries) == len(task_ids) == 4
    assert all(any(s.startswith(t) for s in page.task_summaries) for t in task_ids)
    assert int(page.figures[("modes", "sa", "depth.1")]) == summary["modes"]["sa"]["commits_sa"]
    macro_depths = sum(int(v) for (run, mode, key), v in page.figures.items() if mode == "smc" and key.startswith("depth.") and key != "depth.1")
    assert macro_depths == summary["modes"]["smc"]["commits_macro"]
    # The speculator's measured hit rate at each depth is on the page, as results.json has it.
    rates = summary["modes"]["sa"]["speculator_hit_rate_by_depth"]
    assert rates and summary["modes"]["sa"]["predictions_by_depth"][0] > 0
    for depth, rate in enumerate(rates, 1):
        assert float(page.figures[("modes", "sa", f"hit_rate.{depth}")]) == pytest.approx(rate, abs=1e-3)


def test_timeline_hover_names_the_call_and_its_source(modes_run: Path) -> None:
    results = json.loads((modes_run / "results.json").read_text(encoding="utf-8"))
    page = _read(modes_run / "report.html")
    episode = results["episodes"]["sa"][0]
    first = next(m for m in episode["messages"] if m.get("tool_calls"))["tool_calls"][0]
    source = episode["execution"]["sources"][0]
    assert any(first["name"] + "(" in title and f"[source: {source}]" in title for title in page.titles)


def test_report_refers_to_nothing_outside_the_file(modes_run: Path) -> None:
    page = _read(modes_run / "report.html")
    text = (modes_run / "report.html").read_text(encoding="utf-8")
    assert not page.tags & {"script", "link", "iframe", "img", "object", "embed"}
    assert page.urls and all(_local(url) for url in page.urls), page.urls
    assert "http://" not in text and "https://" not in text and "@import" not in text


def test_report_compares_runs_and_reads_a_plain_run(modes_run: Path, tau2_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain"
    code, summary, _ = _run(["run", "--json", "--bench", "tau2-telecom", "--split", "test", "--limit", "2", "--agent", "oracle",
                             "--data-dir", str(tau2_dir), "--out", str(plain), "--report", "--no-progress"], capsys)
    assert code == 0 and summary is not None and Path(summary["report"]).is_file()
    assert json.loads((plain / "results.json").read_text(encoding="utf-8"))["format"] == RESULTS_FORMAT
    code, summary, _ = _run(["report", str(modes_run), str(plain), "--out", str(tmp_path / "compare.html")], capsys)
    assert code == 0 and summary is not None
    assert summary == {"report": str(tmp_path / "compare.html"), "runs": 2, "tasks": 4, "modes": 4,
                       "bytes": (tmp_path / "compare.html").stat().st_size}
    page = _read(tmp_path / "compare.html")
    # Without --mode, a run is sequential (on the wall clock: compared with itself, not with a virtual-clock run).
    assert float(page.figures[("plain", "sequential", "reward_mean")]) == 1.0
    assert float(page.figures[("plain", "sequential", "speedup_vs_sequential")]) == 1.0


def test_report_reads_a_plain_run_of_the_previous_format(modes_run: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # agentspec.results/v1: a plain run (tau2's own loop) wrote its figures at the top and one list of episodes.
    sequential = json.loads((modes_run / "results.json").read_text(encoding="utf-8"))["episodes"]["sequential"]
    figures = {"tasks": 2, "episodes": 2, "reward_mean": 1.0, "pass_hat_k": {"1": 1.0}, "terminations": {"agent_stop": 2},
               "failed_episodes": 0, "first_error": None, "wall_s": 0.1}
    old = tmp_path / "old"
    old.mkdir()
    (old / "results.json").write_text(json.dumps({"format": "agentspec.results/v1", "summary": {
        "bench": "tau2-telecom", "split": "test", "agent": "oracle", **figures}, "episodes": sequential}), encoding="utf-8")
    code, _, _ = _run(["report", str(old), "--out", str(tmp_path / "old.html")], capsys)
    assert code == 0
    page = _read(tmp_path / "old.html")
    assert float(page.figures[("old", "plain", "reward_mean")]) == 1.0


def test_token_level_figures_come_from_toolspec_usage(modes_run: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "served"
    shutil.copytree(modes_run, run)
    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    message = next(m for m in results["episodes"]["sa"][0]["messages"] if m.get("tool_calls"))
    decoding = [{"target_forwards": 6, "tokens": 24, "accepted_by_source": {"schema": 12, "retrieval": 4}},
                {"target_forwards": 10, "tokens": 20, "accepted_by_source": {"schema": 8}}]
    message["usage"] = {"agentspec_decoding": decoding[0]}
    results["episodes"]["sa"][1]["messages"][0]["usage"] = {"agentspec_decoding": decoding[1]}
    (run / "results.json").write_text(json.dumps(results), encoding="utf-8")
    code, _, _ = _run(["report", str(run), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 0
    page = _read(tmp_path / "r.html")
    assert float(page.figures[("served", "sa", "forwards_per_call")]) == 8.0
    assert float(page.figures[("served", "sa", "tokens_per_forward")]) == pytest.approx(44 / 16, abs=1e-3)
    assert ("served", "smc", "forwards_per_call") not in page.figures
    assert "schema: 20, retrieval: 4" in (tmp_path / "r.html").read_text(encoding="utf-8")


def _edited(modes_run: Path, tmp_path: Path, name: str, edit: Any) -> Path:
    run = tmp_path / name
    run.mkdir()
    results = json.loads((modes_run / "results.json").read_text(encoding="utf-8"))
    edit(results)
    (run / "results.json").write_text(json.dumps(results), encoding="utf-8")
    return run


@pytest.mark.parametrize("case, message", [
    ("missing", "no results.json here"),
    ("other-format", "format 'agentspec.results/v0' is not one this agentspec reads"),
    ("old-shape", "not the results.json of this agentspec version"),
    ("mixed-benches", "a report compares runs of one bench"),
])
def test_bad_input_is_one_line_and_exit_2(case: str, message: str, modes_run: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    runs = {
        "missing": lambda: [tmp_path],
        "other-format": lambda: [_edited(modes_run, tmp_path, "v0", lambda r: r.update(format="agentspec.results/v0"))],
        # No format key (written before it existed) is read only in the current shape.
        "old-shape": lambda: [_edited(modes_run, tmp_path, "old", lambda r: (r.pop("format"), r.update(episodes=7)))],
        "mixed-benches": lambda: [modes_run, _edited(modes_run, tmp_path, "other",
                                                     lambda r: r["summary"].update(bench="appworld"))],
    }[case]()
    code, _, err = _run(["report", *map(str, runs), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "r.html").exists()


def test_a_results_file_without_format_in_the_current_shape_is_read(modes_run: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = _edited(modes_run, tmp_path, "unversioned", lambda r: r.pop("format"))
    code, summary, _ = _run(["report", str(run), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 0 and summary is not None and summary["tasks"] == 4


def test_run_report_without_out_goes_into_the_runs_own_folder(tau2_dir: Path, default_runs_folder: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """It was refused (--report needs --out); a run without --out now keeps its results in a folder of its own."""
    code, summary, err = _run(["run", "--json", "--bench", "tau2-telecom", "--split", "test", "--limit", "1", "--agent",
                               "oracle", "--data-dir", str(tau2_dir), "--report", "--no-progress"], capsys)
    assert code == 0 and summary is not None, err
    folder = Path(summary["results"]).parent
    assert folder.parent == default_runs_folder and folder.name.startswith("tau2-telecom-")
    assert summary["report"] == str(folder / "report.html") and (folder / "report.html").is_file()


def test_report_without_out_writes_into_the_first_run(modes_run: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "copy"
    shutil.copytree(modes_run, run)
    (run / "report.html").unlink()
    code, summary, err = _run(["report", str(run / "results.json")], capsys)
    assert code == 0 and summary is not None and summary["report"] == str(run / "report.html"), err
    assert (run / "report.html").is_file()


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def test_a_real_browser_renders_the_report(modes_run: Path, tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        unavailable("chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)")
    from PIL import Image

    url = (modes_run / "report.html").resolve().as_uri()
    base = [chromium, *CHROMIUM_FLAGS]
    env = {**os.environ, "HOME": str(tmp_path)}
    shot = tmp_path / "shot.png"
    subprocess.run([*base, f"--user-data-dir={tmp_path / 'profile-shot'}", f"--screenshot={shot}",
                    "--window-size=1400,3000", url], check=True, capture_output=True, timeout=120, env=env)
    dom = subprocess.run([*base, f"--user-data-dir={tmp_path / 'profile-dom'}", "--dump-dom", url],
                         check=True, capture_output=True, text=True, timeout=120, env=env).stdout
    with Image.open(shot) as image:
        pixels = image.convert("L").resize((140, 300))
        dark = sum(pixels.histogram()[:200])  # pixels darker than light grey
    assert dark > 0.02 * 140 * 300, "the screenshot is (nearly) blank"
    page = _Page()
    page.feed(dom)
    assert "summary-table" in page.ids
    assert all(("modes", mode, "mean_task_wall_s") in page.figures for mode in MODES)
    assert all(_local(url) for url in page.urls)
