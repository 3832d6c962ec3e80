"""Simulated model and tool latency, so GPU-scale speeds can be studied on a CPU machine.

A :class:`LatencyModel` turns a model request (prompt and output tokens) or a
tool call into seconds.  The executor sleeps that long on the run's clock.
With ``--latency-model`` and only simulated models (oracle, noisy-oracle) the
run uses a *virtual* clock that jumps ahead whenever every task is waiting
(trio's ``MockClock(autojump_threshold=0)`` under anyio's trio backend), so a
study of minutes of simulated time finishes in seconds.

Presets live in ``agentspec/runtime/presets/NAME.json``; each explains its
derivation in its ``derivation`` field.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentspec.errors import ConfigError

PRESETS = Path(__file__).parent / "presets"


class ModelLatency(BaseModel):
    """Time of one request: ``overhead + prompt/prefill_rate + output/decode_rate`` seconds."""

    model_config = ConfigDict(extra="forbid")

    prefill_tokens_per_s: float = Field(gt=0)
    decode_tokens_per_s: float = Field(gt=0)
    overhead_s: float = Field(default=0.0, ge=0)
    reasoning_tokens: int = Field(default=0, ge=0, description="hidden tokens generated before each call")

    def seconds(self, prompt_tokens: int, output_tokens: int) -> float:
        return (
            self.overhead_s
            + prompt_tokens / self.prefill_tokens_per_s
            + (output_tokens + self.reasoning_tokens) / self.decode_tokens_per_s
        )


class ToolLatency(BaseModel):
    """Tool time: ``fixed_s`` plus, when ``jitter_s`` > 0, a uniform sample in [0, jitter_s)."""

    model_config = ConfigDict(extra="forbid")

    fixed_s: float = Field(default=0.0, ge=0)
    jitter_s: float = Field(default=0.0, ge=0)
    per_tool_s: dict[str, float] = Field(default_factory=dict)

    def seconds(self, tool: str, rng: random.Random | None = None) -> float:
        base = self.per_tool_s.get(tool, self.fixed_s)
        return base + (rng.random() * self.jitter_s if rng and self.jitter_s else 0.0)


class LatencyModel(BaseModel):
    """Latency of the authority, the speculator and tools, plus the prompt size it assumes."""

    model_config = ConfigDict(extra="forbid")

    name: str = "custom"
    authority: ModelLatency | None = None
    """None: real models only, whose time is real (the model takes no simulated time)."""
    speculator: ModelLatency | None = None
    tool: ToolLatency = Field(default_factory=ToolLatency)
    system_prompt_tokens: int = Field(default=0, ge=0, description="prompt size before the first step")
    tokens_per_step: int = Field(default=0, ge=0, description="prompt growth per committed step (call + result)")
    recorded: bool = False
    """The recorded clock: a recorded agent (``--agent replay``) takes the time its recording shows for each
    decision and user turn (:mod:`agentspec.runtime.recorded_agent`); only tools are timed here."""
    derivation: str = ""

    def prompt_tokens(self, steps: int) -> int:
        return self.system_prompt_tokens + self.tokens_per_step * steps

    @classmethod
    def load(cls, name_or_path: str) -> LatencyModel:
        """A preset name (``smc-paper``) or a JSON file."""
        path = PRESETS / f"{name_or_path}.json"
        if not path.is_file():
            path = Path(name_or_path)
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in PRESETS.glob("*.json")))
            raise ConfigError(f"--latency-model {name_or_path!r} is neither a preset ({known}) nor a file")
        try:
            data: Any = json.loads(path.read_text(encoding="utf-8"))
            return cls.model_validate(data)
        except (json.JSONDecodeError, ValueError) as exc:
            raise ConfigError(f"{path} is not a valid latency model: {exc}") from exc


def tool_latency(value: float | str) -> ToolLatency:
    """``--tool-latency``: a fixed time in seconds, or a preset's (or a latency model file's) tool times."""
    try:
        seconds = float(value)
    except ValueError:
        return LatencyModel.load(str(value)).tool
    if not 0 <= seconds < float("inf"):
        raise ConfigError(f"--tool-latency {value}: seconds must be a finite number >= 0 (or a latency model's name)")
    return ToolLatency(fixed_s=seconds)


def estimate_tokens(text: str) -> int:
    """Rough token count (4 characters per token) for simulated timing only."""
    return max(1, (len(text) + 3) // 4)
