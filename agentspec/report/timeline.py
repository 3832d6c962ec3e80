"""A picture of one task's execution: lanes for authority, speculator, tools and commits.

:func:`draw_timeline` builds the matplotlib figure (a Gantt chart, one lane
per row, commits as markers coloured by kind, a legend for both, the task id
wrapped over as many title lines as it needs); :func:`plot_timeline` saves it
as a PNG.  Labels are kept readable on long tasks: a bar's label is shortened
("reset_apn_sett…") until it fits inside the bar, or left out; a commit's label
is drawn only where it does not cover another label::

    plot_timeline(episode["execution"]["timeline"], Path("runs/timeline.png"), title=episode["task_id"])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentspec.errors import ConfigError

LANES = ["authority", "probe", "speculator", "speculator-tool", "tool", "commit"]
LANE_NAMES = {"authority": "authority", "probe": "SPORK probe", "speculator": "speculator",
              "speculator-tool": "speculator tool", "tool": "live tool", "user": "user's turn",
              "user-tool": "user's tool", "commit": "commit"}
COLOURS = {"authority": "#4c72b0", "probe": "#64b5cd", "speculator": "#dd8452", "speculator-tool": "#f2b880",
           "tool": "#55a868", "user": "#a1c9a0", "user-tool": "#7fb37d"}
COMMIT_STYLES = {  # kind -> (colour, marker, legend text)
    "sa": ("#c44e52", "v", "commit: speculative action (SA)"),
    "macro": ("#8172b3", "D", "commit: macro step (SMC)"),
    "spork": ("#da8bc3", "*", "commit: SPORK probe"),
    "reuse": ("#8c8c8c", "^", "commit: reused read-only draft"),
    "authority": ("#937860", "o", "commit: authority"),
}
OTHER_COMMIT = ("#555555", "s", "commit: other")
TITLE_WIDTH = 110
"""Characters per title line; longer task ids wrap (at ``|`` where they can)."""
LABEL_FONT = 6.5


def wrap_title(title: str, width: int = TITLE_WIDTH) -> str:
    """``title`` over lines of at most ``width`` characters, broken after ``|``, ``]`` or spaces where possible.

    >>> wrap_title("[a]x|y|z[P]", width=6)
    '[a]x|\\ny|z[P]'
    """
    lines: list[str] = []
    line = ""
    for piece in _pieces(title):
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = ""
        while len(piece) > width:  # one piece longer than a line: cut it hard
            lines.append(piece[:width])
            piece = piece[width:]
        line += piece
    return "\n".join([*lines, line] if line else lines)


def _pieces(text: str) -> list[str]:
    pieces, current = [], ""
    for char in text:
        current += char
        if char in "| ]":
            pieces.append(current)
            current = ""
    return [*pieces, current] if current else pieces


def require_pyplot() -> Any:
    """matplotlib's pyplot on the headless Agg backend; ConfigError (one line) where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("timelines and reports need matplotlib: pip install 'matplotlib>=3.10'") from exc
    return plt


def _fit(text: Any, renderer: Any, left: float, right: float) -> None:
    """Shorten ``text`` until it fits between display x ``left`` and ``right``; hide it when nothing fits."""
    full = text.get_text()
    for keep in range(len(full), 2, -1):
        text.set_text(full if keep == len(full) else full[: keep - 1] + "…")
        box = text.get_window_extent(renderer)
        if box.x0 >= left and box.x1 <= right:
            return
    text.set_visible(False)


def commit_style(kind: str) -> tuple[str, str, str]:
    """(colour, marker, legend label) of a commit kind (``sa``, ``macro``, ``spork``, ``reuse``...)."""
    return COMMIT_STYLES.get(kind.removesuffix("-commit"), OTHER_COMMIT)


def draw_timeline(events: Sequence[Mapping[str, Any]], title: str = "") -> Any:
    """The timeline of ``events`` (dicts with lane, start, end, label, kind) as a matplotlib Figure."""
    plt = require_pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    lanes = [lane for lane in LANES if any(e["lane"] == lane for e in events)] or LANES[:1]
    wrapped = wrap_title(title)
    title_lines = wrapped.count("\n") + 1 if wrapped else 0
    fig, ax = plt.subplots(figsize=(14, 0.8 * len(lanes) + 1.6 + 0.18 * title_lines), layout="constrained")
    bars: list[tuple[Any, float, float]] = []
    commits = [e for e in events if e["lane"] == "commit"]
    for event in events:
        if event["lane"] == "commit":
            continue
        row = lanes.index(event["lane"]) if event["lane"] in lanes else 0
        width = max(event["end"] - event["start"], 0.02)
        ax.barh(row, width, left=event["start"], height=0.6, color=COLOURS.get(event["lane"], "#999999"),
                edgecolor="black", linewidth=0.3)
        text = ax.text(event["start"] + width / 2, row, event["label"], ha="center", va="center", fontsize=LABEL_FONT)
        bars.append((text, event["start"], event["start"] + width))
    # Commits made at the same moment (a macro's steps) are stacked inside the commit row.
    at: dict[float, int] = {}
    commit_texts = []
    for event in commits:
        row = lanes.index("commit")
        index = at.get(round(event["start"], 6), 0)
        at[round(event["start"], 6)] = index + 1
        y = row - 0.3 + 0.2 * (index % 4)
        colour, marker, _ = commit_style(event.get("kind") or "")
        ax.plot([event["start"]], [y], marker=marker, color=colour, markersize=6, markeredgecolor="black",
                markeredgewidth=0.3, linestyle="none")
        commit_texts.append(ax.text(event["start"], y, "  " + event["label"][:24], ha="left", va="center",
                                    fontsize=LABEL_FONT - 0.5))
    ax.set_yticks(range(len(lanes)), [LANE_NAMES.get(lane, lane) for lane in lanes])
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlabel("seconds since task start")
    ax.set_title(wrapped, fontsize=8, loc="left")
    ax.grid(axis="x", linewidth=0.3, alpha=0.5)

    handles: list[Any] = [Patch(facecolor=COLOURS[lane], edgecolor="black", linewidth=0.3, label=LANE_NAMES[lane])
                          for lane in lanes if lane in COLOURS]
    kinds = list(dict.fromkeys(commit_style(e.get("kind") or "") for e in commits))
    handles += [Line2D([], [], marker=marker, color=colour, markeredgecolor="black", markeredgewidth=0.3,
                       linestyle="none", label=label) for colour, marker, label in kinds]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 7), fontsize=7, frameon=False)

    # Fit labels only once the layout (legend, title, tick labels) has settled.
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for text, start, end in bars:
        left, right = ax.transData.transform([(start, 0), (end, 0)])[:, 0]
        _fit(text, renderer, left + 2, right - 2)
    placed = [t.get_window_extent(renderer) for t, _, _ in bars if t.get_visible()]
    for text in commit_texts:
        box = text.get_window_extent(renderer)
        if any(box.overlaps(other) for other in placed):
            text.set_visible(False)
        else:
            placed.append(box)
    return fig


def plot_timeline(events: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Draw ``events`` (dicts with lane, start, end, label, kind) as a Gantt chart PNG at ``path``."""
    plt = require_pyplot()
    fig = draw_timeline(events, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
