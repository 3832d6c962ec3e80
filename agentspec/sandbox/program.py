"""What runs inside a sandbox: a toolkit of declarations plus a standard-library ops module.

A sandboxed environment splits each tool in two.  The *declaration* is an
ordinary ``@tool`` method of a :class:`~agentspec.tools.Toolkit` (schema from
the signature, effect class from the decorator) that only says which op to run
by returning an :class:`Op`.  The *implementation* is a function of the same
program's ops module, a standard-library-only Python file that is copied into
every sandbox and run there by ``runner.py`` with the sandbox's own python3::

    class Files(Toolkit):
        @tool(Effect.READ_ONLY)
        def read_file(self, path: str) -> Op:
            \"\"\"Read a file.\"\"\"
            return Op.of("read_file", path=path)

    program = SandboxProgram(toolkit=Files(), ops_file=Path("ops.py"))   # ops.py: OPS = {"read_file": ...}
    plan(program, ToolCall(name="read_file", arguments={"path": "a"}))   # Op(name='read_file', ...)

So the agent-facing schema is checked here, in the host process, and
everything that touches the sandbox's state runs confined inside it.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentspec.errors import ConfigError
from agentspec.snapshot import error_observation
from agentspec.tools import Toolkit
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec

RUNNER_FILE = Path(__file__).with_name("runner.py")
"""The in-sandbox runner (standard library only)."""

SANDBOX_DIR = "/opt/agentspec"
"""Where runner and ops module live inside a sandbox (read-only for the sandbox user)."""

WORKSPACE = "/workspace"
"""The sandbox user's working directory inside a sandbox: the state snapshots capture."""


@dataclass(frozen=True)
class Op:
    """One op of a program's ops module with its keyword arguments (JSON values)."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, **args: Any) -> Op:
        return cls(name=name, args=args)


@dataclass(frozen=True)
class Limits:
    """Resource limits of every sandbox a backend makes, and of every call run in one.

    Every limit that is set is enforced, or the backend refuses to start
    (:class:`~agentspec.errors.SnapshotError` naming what is missing); ``None``
    switches a limit off, an explicit choice each backend reports in its
    ``isolation`` and in every observation (see the backends' docstrings)::

        limit          docker                              overlay / copy (bubblewrap)
        memory_bytes   cgroup, whole container, no swap    RLIMIT_AS of each process of a call
        pids           cgroup pids.max, whole container    pids cgroup per call (root), else RLIMIT_NPROC
        disk_bytes     --storage-opt size (writable layer) size= of the scratch tmpfs (live, forks, layers
                       or, on a stock engine, a read-only  together) + RLIMIT_FSIZE + size= of /tmp
                       root and a /workspace tmpfs of that
                       size; + RLIMIT_FSIZE; /tmp is a RAM
                       tmpfs
        cpus           cgroup CPU quota                    refused: no CPU cap without a cgroup
        nofile         RLIMIT_NOFILE                       RLIMIT_NOFILE

    ``cpus`` is off by default (only Docker can enforce it).  ``call_timeout_s``
    is the wall-clock limit after which the backend kills a call.
    """

    memory_bytes: int = 512 * 2**20
    cpus: float | None = None
    pids: int | None = 256
    nofile: int = 1024
    disk_bytes: int | None = 2**30
    call_timeout_s: float = 300.0
    max_output: int = 50_000

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "cpus", "pids", "nofile", "disk_bytes", "call_timeout_s", "max_output"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"Limits.{name} must be positive, not {value!r}")

    @property
    def unlimited(self) -> tuple[str, ...]:
        """The limits switched off (``None``), as names for a report: ``("disk_bytes",)``."""
        return tuple(name for name in ("pids", "disk_bytes") if getattr(self, name) is None)


@dataclass(frozen=True)
class SandboxProgram:
    """A toolkit whose tools return :class:`Op` values, plus the ops module that implements them."""

    toolkit: Toolkit
    ops_file: Path

    def __post_init__(self) -> None:
        if not self.ops_file.is_file():
            raise ConfigError(f"ops module {self.ops_file} not found")

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return self.toolkit.specs()

    def effect(self, name: str) -> Effect:
        """The tool's effect class; unknown tools are MUTATING (fail closed)."""
        return self.toolkit.effect(name) if self.toolkit.has_tool(name) else Effect.MUTATING

    def request(
        self,
        op: Op,
        limits: Limits,
        *,
        workspace: str,
        ops_path: str,
        reap: bool,
        memory_rlimit: bool = True,
        pids_rlimit: bool = False,
    ) -> bytes:
        """The runner's stdin for one op.

        ``memory_rlimit``: enforce memory as RLIMIT_AS (where no cgroup does); ``pids_rlimit``: enforce
        ``pids`` as RLIMIT_NPROC (only meaningful in a private user namespace of a non-root user).
        ``disk_bytes`` always caps each file a call writes (RLIMIT_FSIZE).
        """
        rlimits: dict[str, int] = {"nofile": limits.nofile}
        if memory_rlimit:
            rlimits["memory_bytes"] = limits.memory_bytes
        if pids_rlimit and limits.pids is not None:
            rlimits["nproc"] = limits.pids
        if limits.disk_bytes is not None:
            rlimits["fsize_bytes"] = limits.disk_bytes
        body = {
            "op": op.name,
            "args": op.args,
            "ops": ops_path,
            "workspace": workspace,
            "limits": rlimits,
            "reap": reap,
            "max_output": limits.max_output,
        }
        return json.dumps(body).encode()


def plan(program: SandboxProgram, call: ToolCall, requestor: Requestor = "assistant") -> Op | Observation:
    """The op a call asks for, or the error observation when the call itself is wrong.

    Unknown tools and bad arguments are answered like :meth:`Toolkit.run` does
    (``"Error: ..."``), without entering the sandbox.
    """
    try:
        op = program.toolkit.call(call.name, call.arguments)
    except Exception as exc:  # noqa: BLE001 - a wrong call is data for the agent
        return error_observation(call, requestor, str(exc))
    if not isinstance(op, Op):
        return error_observation(call, requestor, f"tool {call.name} did not return an Op")
    return op


def with_isolation(observation: Observation, weakened: str | None) -> Observation:
    """``observation`` marked with the isolation opt-ins it ran under (``"unconfined"``...); as is when none."""
    if weakened is None:
        return observation
    return Observation(**{**observation.model_dump(), "isolation": weakened})


def answer_observation(call: ToolCall, requestor: Requestor, stdout: bytes, detail: str = "") -> Observation:
    """Turn the runner's stdout into an observation; a runner that died gives an error observation."""
    try:
        answer = json.loads(stdout.decode("utf-8", errors="replace"))
        ok, content = bool(answer["ok"]), str(answer["content"])
    except (ValueError, KeyError, TypeError):
        return error_observation(call, requestor, f"the sandboxed tool died before answering{detail}")
    if not ok:
        return error_observation(call, requestor, content)
    return Observation(call_id=call.id, name=call.name, content=content, requestor=requestor)


def runner_observation(call: ToolCall, requestor: Requestor, code: int, out: bytes, err: bytes) -> Observation:
    """What a finished runner process answered; a non-zero exit code and its stderr explain a runner that died."""
    detail = f" (exit code {code}: {err.decode(errors='replace').strip()[-300:]})" if code else ""
    return answer_observation(call, requestor, out, detail)


class ProgramCalls:
    """The call half shared by the backends that run a :class:`SandboxProgram` (overlay, copy, Docker).

    Mixed in before :class:`~agentspec.snapshot.LineageBackend`: a call is planned
    in the host process (a wrong call never enters the sandbox), bounded by
    ``limits.call_timeout_s``, and every observation made in the sandbox is marked
    with the isolation opt-ins in force (``weakened``).
    """

    program: SandboxProgram
    limits: Limits

    @property
    @abstractmethod
    def weakened(self) -> str | None:
        """The isolation opt-ins in force, as every observation records them (None: everything promised);
        each backend defines it from its confinement and limits."""

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return self.program.tool_specs(requestor)

    def effect(self, name: str) -> Effect:
        return self.program.effect(name)

    def _plan(self, call: ToolCall, requestor: Requestor) -> Op | Observation:
        return plan(self.program, call, requestor)

    def _label(self, observation: Observation) -> Observation:
        return with_isolation(observation, self.weakened)

    def _deadline_s(self) -> float | None:
        return self.limits.call_timeout_s
