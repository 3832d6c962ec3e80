"""The learned speculator in a run: its file read once per run, plain ``learned`` fitted and cached, and one
:class:`~agentspec.learned_speculator.policy.LearnedSpeculator` per episode with look-ahead through the episode's backend.

Plain ``--speculator-model learned`` fits on the bench's train split once and keeps the file under
``<cache>/speculators/<sha256>.json`` (the hash of the split's task texts and gold calls, of this format and of the
fit's revision), so the next run with the same data reuses it; where it is goes to stderr.
"""

from __future__ import annotations

import hashlib
import random
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import anyio

from agentspec.data import cache_root
from agentspec.errors import ConfigError
from agentspec.learned_speculator.artifact import FORMAT, load
from agentspec.learned_speculator.command import fit_bench
from agentspec.learned_speculator.fit import FIT_REVISION
from agentspec.learned_speculator.lookahead import ForkLookahead
from agentspec.learned_speculator.model import SpeculatorModel
from agentspec.learned_speculator.policy import LearnedSpeculator
from agentspec.learned_speculator.trajectories import gold_calls, task_text
from agentspec.runtime.latency import LatencyModel
from agentspec.snapshot import SnapshotBackend
from agentspec.types import ToolCall, canonical_json

FIT_SPLIT = "train"


@lru_cache(maxsize=8)
def _read(path: str, stamp: tuple[int, int]) -> SpeculatorModel:
    return load(path).model


def model_at(path: str) -> SpeculatorModel:
    """The fitted tables of a speculator file, read once per run (again when the file changes)."""
    if not path:  # Path("") is the working directory: say what is missing instead
        raise ConfigError("a learned speculator needs its file (learned:FILE); plain `learned` is fitted by a bench run")
    file = Path(path)
    stat = file.stat() if file.is_file() else None
    return _read(str(file.resolve()), (stat.st_mtime_ns, stat.st_size) if stat else (0, 0))


def split_digest(bench: Any, split: str = FIT_SPLIT) -> str:
    """sha256 of what plain ``learned`` fits on: the format and the fit's revision, and each task's text and gold
    calls."""
    digest = hashlib.sha256(f"{FORMAT}\n{FIT_REVISION}\n{bench.name}\n{split}\n".encode())
    for task in sorted(bench.tasks(split), key=lambda t: t.id):
        calls = [c.canonical() for c in gold_calls(bench, task)]
        digest.update(canonical_json([task.id, task_text(bench, task), calls]).encode() + b"\n")
    return digest.hexdigest()


def fitted_for(bench: Any, split: str = FIT_SPLIT) -> str:
    """The cached speculator fitted on ``bench``'s ``split`` (fitted now when there is none); its path."""
    path = cache_root() / "speculators" / f"{split_digest(bench, split)}.json"
    if path.is_file():
        print(f"agentspec: learned speculator: {path} (cached, fitted on {bench.name}/{split})", file=sys.stderr)
        return str(path)
    artifact = anyio.run(lambda: fit_bench(bench, bench.tasks(split), split=split))
    artifact.save(path)
    print(f"agentspec: learned speculator: fitted on {bench.name}/{split}, saved to {path}", file=sys.stderr)
    return str(path)


def episode_speculator(path: str, bench: Any, task: Any, *, latency: LatencyModel | None, virtual: bool,
                       seed: int = 0, width: int = 3, solo: bool = True) -> tuple[LearnedSpeculator, Any]:
    """One episode's learned speculator and the hook that gives it look-ahead once the episode's backend is open
    (``hook(backend)``).  Look-ahead calls take the latency model's tool time, the batch at once (they are
    independent reads); on a virtual clock each prediction takes ``PREDICT_COST_S``.  Its guesses name only the
    agent's own tools (in normal mode, not the user's)."""
    tools = frozenset(spec.name for spec in bench.tools(task, solo=solo))
    return learned_speculator_for(path, task_text(bench, task), latency=latency, virtual=virtual, seed=seed,
                                  width=width, tools=tools)


def learned_speculator_for(path: str, text: str, *, latency: LatencyModel | None, virtual: bool, seed: int = 0,
                           width: int = 3, tools: frozenset[str] | None = None) -> tuple[LearnedSpeculator, Any]:
    """The learned speculator of file ``path`` for a task described by ``text`` (:func:`episode_speculator`'s
    work, for callers with a task text and no bench: the Python API), and its look-ahead hook; ``tools``: the
    only tools its guesses name (None: any)."""
    speculator = LearnedSpeculator(model_at(path), text, width=width, charge_time=virtual, tools=tools)
    rng = random.Random(seed)

    async def charge(calls: Sequence[ToolCall]) -> None:
        if latency is not None and calls:
            await anyio.sleep(max(latency.tool.seconds(call.name, rng) for call in calls))

    def hook(backend: SnapshotBackend) -> None:
        speculator.look_through(ForkLookahead(backend, charge))

    return speculator, hook
