"""What ``agentspec run`` shows a person at the end (``--json`` prints the summary as one JSON line instead): one
row per mode with its reward, task time, speed-up and how speculation fared, then where the results are.

Every figure comes from the run's summary as printed with ``--json`` (:class:`agentspec.results.RunSummary`); a
column shows only where some mode has its figure.  rich is imported here, when the table is drawn, never at
startup.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["mode_rows", "run_table"]

COMMITS = (("sa", "commits_sa"), ("macro", "commits_macro"), ("spork", "commits_spork"), ("reuse", "reused_read_only"))
"""Each way a tool call is committed without the authority waiting for it, as the summary counts it."""
BENCH_SCORES = (("accuracy", "accuracy"), ("tgc", "TGC"), ("sgc", "SGC"))
"""A bench's own score beside the reward (GAIA's accuracy, AppWorld's task and scenario goal completion)."""


def _number(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pass_k(figures: dict[str, Any], trials: int) -> str:
    return _number((figures.get("pass_hat_k") or {}).get(str(trials)))


def _speedup(ratio: Any) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _commits(figures: dict[str, Any]) -> str:
    """Calls committed ahead of the authority, of all the calls made: ``13/19 (sa 8, macro 5)``."""
    kinds = [(name, figures.get(key) or 0) for name, key in COMMITS]
    ahead = sum(count for _, count in kinds)
    if "live_executions" not in figures:
        return "-"
    total = ahead + (figures.get("live_executions") or 0)
    detail = ", ".join(f"{name} {count}" for name, count in kinds if count)
    return f"{ahead}/{total}" + (f" ({detail})" if detail else "")


def _hit_rate(figures: dict[str, Any]) -> str:
    rate = figures.get("speculator_hit_rate")
    return "-" if rate is None or not figures.get("speculator_calls") else f"{rate:.0%}"


def _governor(figures: dict[str, Any]) -> str:
    """``off`` (a mode without one), ``on, saved 36.0 s`` or which speculators it paused."""
    governor = figures.get("governor")
    if not governor:
        return "-"
    paused = [name for name, state in governor.items() if isinstance(state, dict) and state.get("paused")]
    if paused:
        return "paused " + ", ".join(paused)
    saved = sum(state.get("saving_s") or 0.0 for state in governor.values() if isinstance(state, dict))
    return f"on, saved {saved:.1f} s"


Cell = Callable[[str, dict[str, Any]], str]
"""One column's cell for a mode: (mode name, its figures) -> the text shown."""


def _figure(key: str) -> Cell:
    return lambda mode, figures: _number(figures.get(key))


def _columns(summary: dict[str, Any]) -> list[tuple[str, Cell]]:
    """The table's columns, each a title and its cell: those the summary has figures for."""
    modes = summary["modes"]
    trials = summary.get("trials") or 1
    speedups = summary.get("speedup_vs_sequential") or {}
    baseline = (summary.get("vs_baseline") or {}).get("speedup") or {}

    def has(key: str) -> bool:
        return any(figures.get(key) is not None for figures in modes.values())

    columns: list[tuple[str, Cell]] = [("mode", lambda mode, f: mode),
                                       ("tasks", lambda mode, f: str(f.get("tasks", f.get("episodes", "-")))),
                                       ("reward", _figure("reward_mean"))]
    columns += [(title, _figure(key)) for key, title in BENCH_SCORES if has(key)]
    if trials > 1:
        columns.append((f"pass^{trials}", lambda mode, f: _pass_k(f, trials)))
    columns.append(("mean task", lambda mode, f: "-" if f.get("mean_task_wall_s") is None
                    else f"{f['mean_task_wall_s']:.2f} s"))
    if len(speedups) > 1:
        columns.append(("vs sequential", lambda mode, f: _speedup(speedups.get(mode))))
    if baseline:
        columns.append(("vs baseline", lambda mode, f: _speedup(baseline.get(mode))))
    return columns + _speculation_columns(summary, has)


def _speculation_columns(summary: dict[str, Any], has: Callable[[str], bool]) -> list[tuple[str, Cell]]:
    """How speculation fared, where some mode speculated; failed episodes, where some failed."""
    columns: list[tuple[str, Cell]] = []
    if has("speculator_calls"):
        columns += [("hit rate", lambda mode, f: _hit_rate(f)), ("committed ahead", lambda mode, f: _commits(f))]
    if has("governor"):
        columns.append(("governor", lambda mode, f: _governor(f)))
    if any(f.get("failed_episodes") for f in summary["modes"].values()):
        columns.append(("failed", lambda mode, f: str(f.get("failed_episodes") or 0)))
    return columns


def mode_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The table as text: its column titles, and one row per mode (what :func:`run_table` draws)."""
    columns = _columns(summary)
    rows = [[cell(mode, figures) for _, cell in columns] for mode, figures in summary["modes"].items()]
    return [title for title, _ in columns], rows


def _title(summary: dict[str, Any]) -> str:
    parts = [summary.get("bench"), f"split {summary['split']}" if summary.get("split") else None,
             f"{summary.get('tasks')} tasks" if summary.get("tasks") is not None else None,
             f"agent {summary['agent']}" if summary.get("agent") else None, summary.get("play"),
             f"clock {summary['clock'].split(' ')[0]}" if summary.get("clock") else None]
    return ", ".join(str(part) for part in parts if part)


def _notes(summary: dict[str, Any]) -> list[str]:
    """The lines under the table: what went wrong, and where every file the run wrote is."""
    notes = [f"{mode}: {figures['failed_episodes']} episodes failed: {figures.get('first_error')}"
             for mode, figures in summary["modes"].items() if figures.get("failed_episodes")]
    if summary.get("vs_baseline"):
        notes.append(f"baseline: {summary['vs_baseline'].get('baseline')} "
                     f"({summary['vs_baseline'].get('baseline_mode')})")
    if summary.get("data_verified") is False:
        notes.append(f"data: {summary.get('data_dir')} is not the pinned release (data_sha256 in results.json)")
    notes += [f"{label}: {summary[key]}" for key, label in (("report", "report"), ("timeline", "timeline"),
                                                              ("macros_out", "macros"))
              if summary.get(key)]
    notes += [f"official output: {path}" for path in summary.get("official_outputs") or []]
    if summary.get("results"):
        notes.append(f"results: {summary['results']}")
    return notes


def run_table(summary: dict[str, Any]) -> None:
    """Print ``agentspec run``'s summary for a person on stdout: the modes' table, then one line per note (the
    results file last)."""
    from rich.console import Console
    from rich.table import Table

    titles, rows = mode_rows(summary)
    table = Table()
    for index, title in enumerate(titles):
        table.add_column(title, justify="left" if index == 0 else "right", no_wrap=index == 0)
    for row in rows:
        table.add_row(*row)
    # A pipe or a file has no width: wide enough that a row stays one line (a terminal keeps its own).
    console = Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 160)
    console.print(_title(summary), markup=False, soft_wrap=True)
    console.print(table)
    for note in _notes(summary):
        console.print(note, markup=False, soft_wrap=True)
