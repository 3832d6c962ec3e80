"""agentspec: make tool-using LLM agents faster without changing what they do.

The public names are loaded lazily (PEP 562): ``from agentspec import X`` imports X's module on first use, so
``import agentspec.types`` or ``agentspec --help`` does not pay for the executor, the assembly and the model
clients, which eager imports here used to load into every process.  Type checkers read the imports under
``TYPE_CHECKING`` instead, which name the same objects as ``_EXPORTS`` (tests/test_import_graph.py checks).
"""

from __future__ import annotations

# ``typing.X`` rather than ``from typing import ...``: a capitalised global would show in ``dir(agentspec)`` as
# if it were public API.
import importlib
import typing

if typing.TYPE_CHECKING:
    from agentspec.api import Executor, RunResult, run
    from agentspec.assembly import Outcome
    from agentspec.bench.protocol import Bench, BenchTask, Score
    from agentspec.checkpoint import JsonState
    from agentspec.env import Environment, StateSnapshot
    from agentspec.errors import (
        AgentSpecError,
        ConfigError,
        DataError,
        EnvError,
        ModelError,
        ModelOutputError,
        ModelRequestError,
        ModelTimeout,
        ModelUnavailable,
        ReplayMismatch,
        SnapshotError,
        ToolError,
        ToolNotFound,
    )
    from agentspec.models import ModelClient, ModelConfig
    from agentspec.results import Results
    from agentspec.run_spec import RunSpec, SporkSettings
    from agentspec.runtime.conversation import SAY, User, UserTurn
    from agentspec.runtime.latency import LatencyModel
    from agentspec.runtime.modes import Mode
    from agentspec.runtime.policies.protocol import Decision, Policy
    from agentspec.runtime.simulated import SimulatedLatency, SimulatedProbeLatency
    from agentspec.snapshot import InProcessBackend, LineageBackend, Sandbox, SnapshotBackend
    from agentspec.tools import Toolkit, render_result, spec_from_function, tool
    from agentspec.types import (
        Effect,
        Message,
        Observation,
        Step,
        TerminationReason,
        ToolCall,
        ToolSpec,
        Trajectory,
    )
    from agentspec.wrapped_backend import WithTools

__version__ = "0.1.0"

__all__ = [
    "AgentSpecError",
    "Bench",
    "BenchTask",
    "ConfigError",
    "DataError",
    "Decision",
    "Effect",
    "EnvError",
    "Environment",
    "Executor",
    "InProcessBackend",
    "JsonState",
    "LatencyModel",
    "LineageBackend",
    "Message",
    "Mode",
    "ModelClient",
    "ModelConfig",
    "ModelError",
    "ModelOutputError",
    "ModelRequestError",
    "ModelTimeout",
    "ModelUnavailable",
    "Observation",
    "Outcome",
    "Policy",
    "ReplayMismatch",
    "Results",
    "RunResult",
    "RunSpec",
    "SAY",
    "Sandbox",
    "Score",
    "SimulatedLatency",
    "SimulatedProbeLatency",
    "SnapshotBackend",
    "SnapshotError",
    "SporkSettings",
    "StateSnapshot",
    "Step",
    "TerminationReason",
    "ToolCall",
    "ToolError",
    "ToolNotFound",
    "ToolSpec",
    "Toolkit",
    "Trajectory",
    "User",
    "UserTurn",
    "WithTools",
    "render_result",
    "run",
    "spec_from_function",
    "tool",
]

# Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "AgentSpecError": "agentspec.errors",
    "Bench": "agentspec.bench.protocol",
    "BenchTask": "agentspec.bench.protocol",
    "ConfigError": "agentspec.errors",
    "DataError": "agentspec.errors",
    "Decision": "agentspec.runtime.policies.protocol",
    "Effect": "agentspec.types",
    "EnvError": "agentspec.errors",
    "Environment": "agentspec.env",
    "Executor": "agentspec.api",
    "InProcessBackend": "agentspec.snapshot",
    "JsonState": "agentspec.checkpoint",
    "LatencyModel": "agentspec.runtime.latency",
    "LineageBackend": "agentspec.snapshot",
    "Message": "agentspec.types",
    "Mode": "agentspec.runtime.modes",
    "ModelClient": "agentspec.models",
    "ModelConfig": "agentspec.models",
    "ModelError": "agentspec.errors",
    "ModelOutputError": "agentspec.errors",
    "ModelRequestError": "agentspec.errors",
    "ModelTimeout": "agentspec.errors",
    "ModelUnavailable": "agentspec.errors",
    "Observation": "agentspec.types",
    "Outcome": "agentspec.assembly",
    "Results": "agentspec.results",
    "Policy": "agentspec.runtime.policies.protocol",
    "ReplayMismatch": "agentspec.errors",
    "RunResult": "agentspec.api",
    "RunSpec": "agentspec.run_spec",
    "SAY": "agentspec.runtime.conversation",
    "Sandbox": "agentspec.snapshot",
    "Score": "agentspec.bench.protocol",
    "SimulatedLatency": "agentspec.runtime.simulated",
    "SimulatedProbeLatency": "agentspec.runtime.simulated",
    "SnapshotBackend": "agentspec.snapshot",
    "SnapshotError": "agentspec.errors",
    "SporkSettings": "agentspec.run_spec",
    "StateSnapshot": "agentspec.env",
    "Step": "agentspec.types",
    "TerminationReason": "agentspec.types",
    "ToolCall": "agentspec.types",
    "ToolError": "agentspec.errors",
    "ToolNotFound": "agentspec.errors",
    "ToolSpec": "agentspec.types",
    "Toolkit": "agentspec.tools",
    "Trajectory": "agentspec.types",
    "User": "agentspec.runtime.conversation",
    "UserTurn": "agentspec.runtime.conversation",
    "WithTools": "agentspec.wrapped_backend",
    "render_result": "agentspec.tools",
    "run": "agentspec.api",
    "spec_from_function": "agentspec.tools",
    "tool": "agentspec.tools",
}


def __dir__() -> list[str]:
    """The module's globals and every public name, loaded or not (what ``dir(agentspec)`` and completion show)."""
    return sorted(set(globals()) | set(__all__))


# Defined only at run time: a type checker that saw a module ``__getattr__`` would accept any name, typos
# included, as ``from agentspec import X``; it resolves the public names through the imports above instead.
if not typing.TYPE_CHECKING:

    def __getattr__(name: str) -> typing.Any:
        """Import a public name's module on first access and keep the value as a module global (later look-ups
        are plain attribute reads, and never reach this function)."""
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
