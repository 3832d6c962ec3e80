"""Files a user is handed are untrusted: a speculator file with a pattern that backtracks without end, one nested
too deep, a key file that is a FIFO or a folder, a changed speculator on resume.  Each is one line (exit 2) or a
bounded failure, never a hang or a traceback (issue 37, items 4, 9 and 10)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import anyio
import pytest

from agentspec.errors import ConfigError
from agentspec.learned_speculator.command import fit_bench
from agentspec.learned_speculator.sources import TypedValues
from agentspec.normalize import REGEX_TIMEOUT_S, BoundedPattern, ValuePattern


def test_a_pattern_that_backtracks_without_end_fails_within_its_bound() -> None:
    pattern = BoundedPattern(r"(a|aa)+b")
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"took over .* s on a text of 60 characters \(it backtracks"):
        pattern.search("a" * 60)
    assert time.monotonic() - started < REGEX_TIMEOUT_S + 1.0


def test_the_reported_pattern_no_longer_hangs_on_task_text() -> None:
    """``(\\w+\\s?)*\\$XYZ`` ran for over 600 s over a task text with Python's ``re``; bounded, it is done at once."""
    typed = TypedValues((ValuePattern.of("x", r"(\w+\s?)*\$XYZ"),))
    text = "John Smith customer 555-123-2002 line L1002 roaming abroad data usage " * 20
    started = time.monotonic()
    typed.find(text)
    assert time.monotonic() - started < REGEX_TIMEOUT_S + 1.0


def test_a_learned_file_with_a_hostile_pattern_ends_the_run_in_seconds(bench, tau2_dir: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A speculator file whose pattern backtracks without end on the task text: the episode fails at once with the
    pattern named (it ran for over 600 s before, SIGINT ignored)."""
    from agentspec.cli import main

    spec = tmp_path / "spec.json"
    anyio.run(lambda: fit_bench(bench, bench.tasks("train", limit=4), split="train")).save(spec)
    data = json.loads(spec.read_text())
    data["model"]["value_patterns"] = [["x", r"(\w|\w\w|\s|-)+\d{50}", None], *data["model"]["value_patterns"]]
    spec.write_text(json.dumps(data))
    started = time.monotonic()
    code = main(["run", "--json", "--bench", "tau2-telecom", "--split", "test", "--limit", "1", "--solo", "--agent", "oracle",
                 "--mode", "sa", "--speculator-model", f"learned:{spec}", "--data-dir", str(tau2_dir), "--no-progress"])
    assert time.monotonic() - started < 60
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1]) if code == 0 else None
    said = err if summary is None else str(summary["modes"]["sa"]["first_error"])
    assert "backtracks without end" in said and r"(\w|\w\w|\s|-)+\d{50}" in said, (code, said)


def test_a_speculator_file_nested_too_deep_is_one_line(tmp_path: Path) -> None:
    from agentspec.learned_speculator.artifact import load

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ConfigError, match="nested too deep"):
        load(deep)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load(fifo)


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_key_file_that_is_a_fifo_or_a_folder_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           kind: str) -> None:
    from agentspec.checkpoint import key_path, sign

    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path / "cache"))
    path = key_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    started = time.monotonic()
    with pytest.raises(ConfigError, match="is not a regular file"):
        sign(b"record")
    assert time.monotonic() - started < 5


def test_a_changed_speculator_file_is_refused_on_resume(bench, tau2_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A resume under a speculator file whose content changed would blend two speculators' guesses in one run."""
    from agentspec.cli import main

    spec = tmp_path / "spec.json"
    anyio.run(lambda: fit_bench(bench, bench.tasks("train", limit=4), split="train")).save(spec)
    run = ["run", "--bench", "tau2-telecom", "--split", "test", "--limit", "2", "--solo", "--agent", "oracle",
           "--mode", "sa", "--speculator-model", f"learned:{spec}", "--data-dir", str(tau2_dir), "--no-progress",
           "--out", str(tmp_path / "out")]
    assert main(run) == 0
    anyio.run(lambda: fit_bench(bench, bench.tasks("train", limit=6), split="train")).save(spec)
    capsys.readouterr()
    assert main([*run, "--resume"]) == 2
    assert "learned_speculators" in capsys.readouterr().err
