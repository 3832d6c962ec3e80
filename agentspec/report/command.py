"""What ``agentspec report RUN_DIR [RUN_DIR ...] --out FILE.html`` and ``agentspec run ... --report`` do.

Builds the context from the runs (:mod:`~agentspec.report.load`, :mod:`~agentspec.report.tables`,
:mod:`~agentspec.report.figures`) and renders ``templates/report.html.j2`` with Jinja2 into one static page::

    summary = write_report([Path("runs/modes")], Path("runs/modes/report.html"))
    # {"report": "runs/modes/report.html", "runs": 1, "tasks": 40, "modes": 3, "bytes": ...}
"""

from __future__ import annotations

import html
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from agentspec.errors import ConfigError
from agentspec.report import tables
from agentspec.report.figures import box_figure, cdf_figure, speedup_figure, timeline_end, timeline_layout
from agentspec.report.load import Run, load_runs
from agentspec.user_files import out_dir


def _series(runs: list[Run]) -> dict[str, list[float]]:
    """Task times per (run, mode), named "mode" for one run and "run: mode" for several."""
    def name(run: Run, mode: str) -> str:
        return mode if len(runs) == 1 else f"{run.name}: {mode}"
    return {name(run, mode): tables.task_times(data) for run in runs for mode, data in run.modes.items()}


def _tasks(runs: list[Run]) -> list[dict[str, Any]]:
    """Per task (in first-seen order): for each run and mode, its episodes' time, reward, checks and timeline."""
    records: dict[str, list[tuple[Run, str, dict[str, Any]]]] = {}
    for run in runs:
        for mode, data in run.modes.items():
            for record in data.episodes:
                records.setdefault(str(record.get("task_id")), []).append((run, mode, record))
    tasks = []
    for task_id, found in records.items():
        end = _task_end(found)  # one time axis for all of a task's timelines
        tasks.append({"id": task_id, "episodes": [_episode(run, mode, record, end) for run, mode, record in found]})
    return tasks


def _task_end(found: list[tuple[Run, str, dict[str, Any]]]) -> float:
    return max(timeline_end((record.get("execution") or {}).get("timeline") or []) for _, _, record in found)


def _episode(run: Run, mode: str, record: dict[str, Any], end: float) -> dict[str, Any]:
    steps = tables.trajectory(record)
    timeline = (record.get("execution") or {}).get("timeline") or []
    return {"run": run.name, "mode": mode, "trial": record.get("trial", 0), "reward": record.get("reward"),
            "time": round(tables.task_time(record), 3), "termination": record.get("termination"),
            "error": record.get("error"), "steps": steps, "checks": tables.checks(record),
            "timeline": timeline_layout(timeline, steps, end) if timeline else None}


def _version() -> str:
    try:
        return version("agentspec")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(source tree)"


def build_context(runs: list[Run]) -> dict[str, Any]:
    """Everything the template shows, as plain data."""
    series = _series(runs)
    speedups = tables.speedups_per_task(runs)
    return {
        "version": _version(), "bench": runs[0].bench,
        "runs": [{"name": r.name, "path": str(r.path), "summary": {k: v for k, v in r.summary.items() if k != "modes"},
                  "logs": {m: d.log for m, d in r.modes.items() if d.log}} for r in runs],
        "summary_rows": tables.summary_rows(runs),
        "cdf": cdf_figure(series), "box": box_figure(series),
        "speedup": speedup_figure(speedups) if speedups else None,
        "depth_rows": tables.depth_rows(runs), "macro_rows": tables.macro_rows(runs),
        "probe_rows": tables.probe_rows(runs), "token_rows": tables.token_rows(runs),
        "tasks": _tasks(runs),
    }


def render(context: dict[str, Any]) -> str:
    """The page: ``templates/report.html.j2`` rendered with autoescaping."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(loader=PackageLoader("agentspec.report", "templates"), autoescape=select_autoescape(["j2", "html"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = _num
    return env.get_template("report.html.j2").render(**context)


def _num(value: Any, digits: int = 3) -> str:
    """A figure as the page shows it: ``-`` for none, integers as is, floats to ``digits`` decimals."""
    if value is None:
        return "–"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.1f}" if value.is_integer() else f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return html.escape(str(value))


def write_report(folders: list[Path], out: Path, bench: Any = None) -> dict[str, Any]:
    """Read ``folders`` (run --out folders; with ``bench``, also recorded runs of real agents it reads), write the
    report to ``out``; the command's JSON summary."""
    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder: give a file name, e.g. {out / 'report.html'}")
    out_dir(str(out.parent))
    runs = load_runs(folders, bench)
    page = render(build_context(runs))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    tasks = {str(e.get("task_id")) for r in runs for d in r.modes.values() for e in d.episodes}
    return {"report": str(out), "runs": len(runs), "tasks": len(tasks),
            "modes": sum(len(r.modes) for r in runs), "bytes": len(page.encode("utf-8"))}


def report_after_run(out: Path) -> str:
    """``agentspec run --out OUT --report``: write ``OUT/report.html`` from the run just written; its path."""
    return write_report([out], out / "report.html")["report"]
