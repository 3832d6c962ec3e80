"""The one error tree of agentspec.

Every failure that crosses a seam (model endpoint, environment, data files,
command line) is translated into one of these, so callers can catch at the
level they care about::

    AgentSpecError
    ├── ConfigError            bad flags, environment variables or files given by the user
    │   ├── UsageError         the command line itself does not parse (argparse's complaint)
    │   └── DataError          benchmark data missing, corrupt (hash mismatch) or malformed
    ├── ModelError             anything that went wrong talking to a model endpoint
    │   ├── ModelTimeout       (also a TimeoutError)
    │   ├── ModelUnavailable   connection refused, dead endpoint, 5xx after retries
    │   ├── ModelRequestError  the endpoint rejected the request (4xx)
    │   └── ModelOutputError   the model answered with something unusable
    ├── EnvError               environment-level failures (not tool errors, which are observations)
    │   ├── ToolNotFound       (also a LookupError)
    │   └── ReplayMismatch     evaluation replay gave a different tool output
    ├── SnapshotError          a snapshot could not be taken or restored
    └── ClusterError           an episode could not be completed on the Ray cluster
"""

from __future__ import annotations

import pydantic


class AgentSpecError(Exception):
    """Base class of every error agentspec raises on purpose."""


class ConfigError(AgentSpecError, ValueError):
    """The user gave a flag, variable or file that cannot be used."""


class UsageError(ConfigError):
    """The command line does not parse: an unknown flag, a missing argument, a number out of range."""


class DataError(ConfigError):
    """Benchmark data is missing, malformed or fails its hash check."""


class ModelError(AgentSpecError):
    """A model endpoint could not produce a usable answer."""


class ModelTimeout(ModelError, TimeoutError):
    """The endpoint did not answer within the configured timeout."""


class ModelUnavailable(ModelError, ConnectionError):
    """The endpoint could not be reached or kept failing after retries."""


class ModelRequestError(ModelError):
    """The endpoint rejected the request (an HTTP 4xx answer)."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class ModelOutputError(ModelError):
    """The model answered, but the answer cannot be used (no choices, bad JSON arguments...)."""


class EnvError(AgentSpecError):
    """An environment failed in a way that is not an ordinary tool error."""


class ToolNotFound(EnvError, LookupError):
    """The caller asked for a tool it does not have."""


class ReplayMismatch(EnvError):
    """Replaying a trajectory produced a different tool output than recorded."""


class SnapshotError(AgentSpecError):
    """A snapshot could not be taken or restored."""


class ToolError(Exception):
    """Raised inside a tool body to report an ordinary tool error.

    The toolkit turns any exception raised by a tool into an error
    observation (``"Error: <text>"``); this class exists so tool code can say
    so explicitly.  It is deliberately *not* an :class:`AgentSpecError`: a tool
    error is data for the agent, not a failure of the framework.
    """


class ClusterError(AgentSpecError):
    """An episode could not be completed on the Ray cluster (its worker kept dying), or the cluster went away."""


def first_problem(exc: pydantic.ValidationError, top: str = "top level") -> str:
    """``where: what`` of a validation error's first problem, one line (``top`` names the document's root), e.g.
    ``macros.0.steps: Field required``: pydantic's own message names the rule, not the field."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or top
    return f"{where}: {str(first['msg']).removeprefix('Value error, ')}"
