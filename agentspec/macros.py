"""The macro library: mined multi-step skeletons the executor may commit in one go.

Below both the runtime (SMC commits macros) and mining (which makes them): :class:`Macro`, :class:`MacroLibrary`,
:func:`align` and the Beta bound :func:`lower_bound` depend on nothing of either.

File format (JSON, versioned by ``format``)::

    {
      "format": "agentspec.macros/v1",
      "bench": "tau2-telecom",
      "provenance": {"source": [...], "split": "train", "speculator": "...", "seed": 0,
                     "data_sha256": "...", ...},
      "parameters": {"delta": 0.05, "n_min": 3, "tau": 0.5, ...},
      "macros": [
        {"id": "m0001",
         "steps": [{"name": "reset_apn_settings", "arguments": {}},
                   {"name": "reboot_device", "arguments": {}}],
         "slots": {},
         "n": 12, "k": 11, "lcb": 0.68, "score": 1.63,
         "support": 9, "flow": {}}
      ]
    }

An argument value ``{"$slot": "NAME"}`` is a typed slot: it matches any value,
but every occurrence of one slot within a macro must bind the same value (the
macro's data flow).  ``slots`` maps slot names to their type (``customer_id``,
``phone_number``, ``amount``...).  Any other value is a constant that must
match exactly (canonically: ``2`` and ``2.0`` differ).

A library records what it was made from, never when: saving the same library
gives the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentspec.errors import ConfigError, first_problem
from agentspec.types import ToolCall, canonical_json

FORMAT = "agentspec.macros/v1"


def lower_bound(k: int, n: int, delta: float = 0.05) -> float:
    """Lower delta-quantile of the Beta(k+1, n-k+1) posterior of a macro's reliability."""
    # scipy costs about half a second to import; only mining's filter calls this, every run imports this module.
    from scipy.stats import beta

    return float(beta.ppf(delta, k + 1, n - k + 1))


class MacroStep(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Macro(BaseModel):
    """A skeleton of 2-4 calls with slots, and its reliability statistics."""

    model_config = ConfigDict(extra="forbid")

    id: str
    steps: list[MacroStep] = Field(min_length=2)
    slots: dict[str, str] = Field(default_factory=dict)
    n: int = Field(default=0, ge=0)
    k: int = Field(default=0, ge=0)
    lcb: float = 0.0
    score: float = 0.0
    support: int = Field(default=0, ge=0)
    """Occurrences in the mined trajectories (provenance; the executor ignores it)."""
    flow: dict[str, str] = Field(default_factory=dict)
    """Where each slot's value first appears: ``steps[0].arguments.customer_id`` or
    ``steps[0].observation`` (the value was read from that step's result)."""

    def observe(self, success: bool, delta: float = 0.05) -> None:
        """Online update from one firing: n += 1, k += success, lcb recomputed."""
        self.n += 1
        self.k += int(success)
        self.lcb = lower_bound(self.k, self.n, delta)


def _bind(template: Any, value: Any, bindings: dict[str, str]) -> bool:
    if isinstance(template, dict) and set(template) == {"$slot"}:
        slot, seen = template["$slot"], canonical_json(value)
        if bindings.setdefault(slot, seen) != seen:
            return False
        return True
    if isinstance(template, dict):
        return isinstance(value, dict) and template.keys() == value.keys() and all(
            _bind(template[key], value[key], bindings) for key in template
        )
    if isinstance(template, list):
        return isinstance(value, list) and len(template) == len(value) and all(
            _bind(t, v, bindings) for t, v in zip(template, value, strict=True)
        )
    return canonical_json(template) == canonical_json(value)


def align(steps: list[MacroStep], calls: list[ToolCall], bindings: dict[str, str] | None = None) -> dict[str, str] | None:
    """Bindings if ``calls`` instantiate ``steps`` (same length) with consistent slots, else None."""
    if len(steps) != len(calls):
        return None
    bound: dict[str, str] = dict(bindings or {})
    for step, call in zip(steps, calls, strict=True):
        if step.name != call.name or not _bind(step.arguments, call.arguments, bound):
            return None
    return bound


class MacroLibrary(BaseModel):
    """A versioned set of macros, loaded from and saved to ``macros/*.json``."""

    model_config = ConfigDict(extra="forbid")

    format: str = FORMAT
    bench: str = ""
    provenance: dict[str, Any] = Field(default_factory=dict)
    parameters: dict[str, Any] = Field(default_factory=dict)
    macros: list[Macro] = Field(default_factory=list)

    @property
    def tau(self) -> float:
        return float(self.parameters.get("tau", 0.5))

    @property
    def delta(self) -> float:
        return float(self.parameters.get("delta", 0.05))

    def active(self) -> list[Macro]:
        """Macros whose reliability bound is still at least tau (others stop firing)."""
        return [m for m in self.macros if m.lcb >= self.tau]

    @classmethod
    def load(cls, path: str | Path) -> MacroLibrary:
        try:
            library = cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read macro library {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"macro library {path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
        except ValidationError as exc:
            raise ConfigError(f"{path} is not a valid macro library: {first_problem(exc)}") from exc
        if library.format != FORMAT:
            raise ConfigError(f"{path} has format {library.format!r}; this agentspec reads {FORMAT!r}")
        return library

    def save(self, path: str | Path) -> None:
        """Write the library as indented JSON; no timestamp, so equal libraries are equal files."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(self.model_dump(mode="json"), indent=1) + "\n", encoding="utf-8")
