"""The report's pictures, as inline SVG: matplotlib charts, and per-task timelines laid out for hover text.

Charts (task-time CDF, box plot, per-task speed-up) are matplotlib figures saved as SVG text with the XML
prologue and metadata removed, so the page embeds them and never refers to anything outside itself.  A
timeline is laid out here as rectangles and markers (:func:`timeline_layout`) and drawn by the template,
so every bar carries its own ``<title>`` hover text (lane, times, the call and its source).
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentspec.report.timeline import COLOURS, LANE_NAMES, LANES, commit_style, require_pyplot
from agentspec.stats import percentile

WIDTH = 1180
"""Timeline width in CSS pixels (the page is 1240 wide, less its padding)."""
LEFT = 130
LANE_HEIGHT = 26
CHAR_PX = 6.2
"""Approximate width of one label character at the timeline's 11 px font: a label is drawn only where it fits."""


def _svg(fig: Any) -> str:
    """A figure as SVG markup fit for inlining: no XML prologue, DOCTYPE or metadata (they name external URLs)."""
    plt = require_pyplot()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    return re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", text)


STYLE = {"svg.fonttype": "none", "svg.hashsalt": "agentspec-report", "font.size": 10,
         "axes.spines.top": False, "axes.spines.right": False}
"""Chart style: text stays text (smaller, searchable), ids are stable across runs; set per figure, never globally."""


def cdf_figure(times: Mapping[str, Sequence[float]]) -> str:
    """Empirical CDF of task time per series, with each series' P95 marked."""
    plt = require_pyplot()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7.2, 3.8), layout="constrained")
        for name, values in times.items():
            ordered = sorted(values)
            if not ordered:
                continue
            ys = [(i + 1) / len(ordered) for i in range(len(ordered))]
            (line,) = ax.step(ordered, ys, where="post", label=name, linewidth=1.6)
            ax.axvline(percentile(ordered, 0.95), color=line.get_color(), linestyle=":", linewidth=1)
        ax.axhline(0.95, color="#999999", linewidth=0.6)
        ax.set_xlabel("task time (s); dotted: P95")
        ax.set_ylabel("fraction of tasks")
        ax.grid(linewidth=0.3, alpha=0.6)
        ax.legend(fontsize=8, frameon=False, loc="lower right")
        return _svg(fig)


def box_figure(times: Mapping[str, Sequence[float]]) -> str:
    """Box plot of task time per series (whiskers 5-95%)."""
    plt = require_pyplot()
    names = [n for n, v in times.items() if v]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(4.6, 0.5 * len(names) + 1.4), layout="constrained")
        ax.boxplot([list(times[n]) for n in names], orientation="horizontal", whis=(5, 95), widths=0.55)
        ax.set_yticks(range(1, len(names) + 1), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("task time (s); whiskers 5-95%")
        ax.grid(axis="x", linewidth=0.3, alpha=0.6)
        return _svg(fig)


def speedup_figure(ratios: Mapping[str, Sequence[float]]) -> str:
    """Per-task speed-up over sequential, sorted, one line per series (1.0 = as fast as sequential)."""
    plt = require_pyplot()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7.2, 3.4), layout="constrained")
        for name, values in ratios.items():
            ordered = sorted(values, reverse=True)
            ax.plot(range(1, len(ordered) + 1), ordered, marker="o", markersize=3, linewidth=1.2, label=name)
        ax.axhline(1.0, color="#555555", linewidth=0.8, linestyle="--")
        ax.set_xlabel("tasks, fastest first")
        ax.set_ylabel("sequential time / mode time")
        ax.grid(linewidth=0.3, alpha=0.6)
        ax.legend(fontsize=8, frameon=False)
        return _svg(fig)


def _fits(label: str, width: float) -> str:
    """``label`` cut to the bar's width ("reset_apn_sett…"), or empty when not even 3 characters fit."""
    room = int((width - 6) / CHAR_PX)
    if room >= len(label):
        return label
    return label[: room - 1] + "…" if room >= 4 else ""


def _hover_steps(events: list[dict[str, Any]], steps: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Which committed steps each event stands for (by event index): authority decisions map to the steps the
    authority decided, live tool runs to the steps it ran, commits to the steps they committed, in order."""
    decided = iter([s for s in steps if s["source"] != "macro"])
    live = iter([s for s in steps if s["source"] == "authority"])
    committed = iter(steps)
    out: dict[int, list[dict[str, Any]]] = {}
    # Events are recorded when they end; the steps happened in the order the events started.
    for index in sorted(range(len(events)), key=lambda i: float(events[i].get("start", 0))):
        event = events[index]
        lane = event.get("lane")
        if lane == "authority" and event.get("label") != "done":
            out[index] = [s for s in [next(decided, None)] if s]
        elif lane == "tool":
            out[index] = [s for s in [next(live, None)] if s]
        elif lane == "commit":
            out[index] = [s for s in (next(committed, None) for _ in str(event.get("label", "")).split("+")) if s]
    return out


def timeline_end(events: list[dict[str, Any]]) -> float:
    """When the last event of a timeline ends (seconds since task start)."""
    return max([float(e.get("end", 0)) for e in events] + [1e-9])


def timeline_layout(events: list[dict[str, Any]], steps: list[dict[str, Any]], end: float | None = None) -> dict[str, Any]:
    """Rectangles, markers and axis ticks of one task's timeline, in pixels, each with its hover text.

    ``end`` fixes the time axis (the slowest mode's end), so a task's timelines share one scale.
    """
    lanes = [lane for lane in LANES if any(e.get("lane") == lane for e in events)] or LANES[:1]
    end = max(end or 0.0, timeline_end(events))
    scale = (WIDTH - LEFT - 10) / end
    linked = _hover_steps(events, steps)
    bars, marks = [], []
    stacked: dict[float, int] = {}
    for index, event in enumerate(events):
        lane = event.get("lane", "")
        row = lanes.index(lane) if lane in lanes else 0
        start, stop = float(event.get("start", 0)), float(event.get("end", 0))
        about = [f"{s['call']}  [source: {s['source']}]" for s in linked.get(index, [])]
        hover = "\n".join([f"{LANE_NAMES.get(lane, lane)}: {event.get('label', '')}",
                           f"{start:.2f}–{stop:.2f} s ({stop - start:.2f} s)", *about])
        if lane == "commit":
            colour, _, legend = commit_style(str(event.get("kind") or ""))
            slot = stacked.get(round(start, 6), 0)
            stacked[round(start, 6)] = slot + 1
            marks.append({"x": LEFT + start * scale, "y": row * LANE_HEIGHT + 3 + 4 * (slot % 4), "colour": colour,
                          "hover": hover.replace(f"{LANE_NAMES['commit']}:", legend + ":")})
            continue
        width = max((stop - start) * scale, 1.0)
        bars.append({"x": LEFT + start * scale, "y": row * LANE_HEIGHT + 4, "width": width, "height": LANE_HEIGHT - 8,
                     "colour": COLOURS.get(lane, "#999999"), "label": _fits(str(event.get("label", "")), width),
                     "hover": hover})
    step = _tick_step(end)
    ticks = [{"x": LEFT + t * step * scale, "text": f"{t * step:g}"} for t in range(int(end / step) + 1)]
    return {"lanes": [{"name": LANE_NAMES.get(lane, lane), "y": i * LANE_HEIGHT} for i, lane in enumerate(lanes)],
            "bars": bars, "marks": marks, "ticks": ticks, "width": WIDTH, "left": LEFT,
            "height": len(lanes) * LANE_HEIGHT + 22, "axis_y": len(lanes) * LANE_HEIGHT}


def _tick_step(end: float) -> float:
    """A round tick spacing giving about 10 ticks over ``end`` seconds."""
    for step in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000):
        if end / step <= 12:
            return step
    return end / 10
