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
from agentspec.checkpoint import JsonState
from agentspec.env import Environment, StateSnapshot
from agentspec.models import ModelClient, ModelConfig
from agentspec.runtime.policies import Decision, Policy
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

__version__ = "0.1.0"

__all__ = [
    "AgentSpecError",
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
    "ModelClient",
    "ModelConfig",
    "ModelError",
    "ModelOutputError",
    "ModelRequestError",
    "ModelTimeout",
    "ModelUnavailable",
    "Observation",
    "Policy",
    "ReplayMismatch",
    "RunResult",
    "Sandbox",
    "SimulatedLatency",
    "SimulatedProbeLatency",
    "SnapshotBackend",
    "SnapshotError",
    "StateSnapshot",
    "Step",
    "TerminationReason",
    "ToolCall",
    "ToolError",
    "ToolNotFound",
    "ToolSpec",
    "Toolkit",
    "Trajectory",
    "render_result",
    "spec_from_function",
    "tool",
]
