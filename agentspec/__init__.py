"""agentspec: make tool-using LLM agents faster without changing what they do."""

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
from agentspec.api import Executor, RunResult
from agentspec.assembly import Outcome, run
from agentspec.bench.protocol import Bench, BenchTask, Score
from agentspec.checkpoint import JsonState
from agentspec.env import Environment, StateSnapshot
from agentspec.models import ModelClient, ModelConfig
from agentspec.run_spec import RunSpec, SporkSettings
from agentspec.runtime.conversation import SAY, User, UserTurn
from agentspec.runtime.modes import Mode
from agentspec.runtime.policies import Decision, Policy
from agentspec.runtime.simulated import SimulatedLatency, SimulatedProbeLatency
from agentspec.snapshot import InProcessBackend, LineageBackend, Sandbox, SnapshotBackend
from agentspec.tools import Toolkit, render_result, spec_from_function, tool
from agentspec.wrapped_backend import WithTools
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
