"""A picture of one task's execution: lanes for authority, speculator, tools and commits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentspec.errors import ConfigError

LANES = ["authority", "speculator", "speculator-tool", "tool", "commit"]
COLOURS = {"authority": "#4c72b0", "speculator": "#dd8452", "speculator-tool": "#f2b880", "tool": "#55a868",
           "sa": "#c44e52", "macro": "#8172b3", "authority-commit": "#937860"}


def plot_timeline(events: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Draw ``events`` (dicts with lane, start, end, label, kind) as a Gantt chart PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("timelines need matplotlib: pip install 'agentspec[plot]'") from exc
    lanes = [lane for lane in LANES if any(e["lane"] == lane for e in events)] or LANES[:1]
    fig, ax = plt.subplots(figsize=(12, 0.7 * len(lanes) + 1.5))
    for event in events:
        row = lanes.index(event["lane"]) if event["lane"] in lanes else 0
        width = max(event["end"] - event["start"], 0.02)
        colour = COLOURS.get(event.get("kind") or event["lane"], COLOURS.get(event["lane"], "#999999"))
        ax.barh(row, width, left=event["start"], height=0.6, color=colour, edgecolor="black", linewidth=0.3)
        if width > 0.4:
            ax.text(event["start"] + width / 2, row, event["label"][:18], ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since task start")
    ax.set_title(title[:110], fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
