"""Which model answers each role of a run (agent, user, speculator), and the clients that reach them.

Every way to start a run (``run``, ``run --mode``, ``mine``) resolves its
roles here, so a flag means the same thing everywhere.  ``--ROLE-model`` is
an endpoint (``URL``, ``URL#MODEL``, or a name with ``--ROLE-base-url`` /
``AGENTSPEC_ROLE_BASE_URL`` / ``OPENAI_BASE_URL``), or a local model name
from :data:`agentspec.models.registry.MODELS` with no endpoint anywhere: that
role is served embedded, and the roles naming the same local model share one
child server::

    >>> import argparse
    >>> args = argparse.Namespace(agent_model="qwen2.5-coder-0.5b", agent_base_url=None,
    ...                           speculator_model="qwen2.5-coder-0.5b", speculator_base_url=None, temperature=None)
    >>> plan = plan_roles(args, {"agent": None, "speculator": None}, env={})
    >>> plan.embedded, plan.served_models, plan.endpoints
    ({'agent': 'qwen2.5-coder-0.5b', 'speculator': 'qwen2.5-coder-0.5b'}, ['qwen2.5-coder-0.5b'], {})
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from agentspec.errors import ModelRequestError, ModelUnavailable
from agentspec.models import ModelClient, ModelConfig
from agentspec.models.registry import MODELS

__all__ = ["RolePlan", "open_clients", "plan_roles", "preflight", "role_given"]

EMBEDDED_TIMEOUT_S = 3600
"""CPU generation is slow: a long timeout, and no retry that would redo a long generation."""


def _prefix(role: str) -> str:
    return "AGENTSPEC_" + role.upper().replace("-", "_") + "_"


def _flag(args: argparse.Namespace, role: str, what: str) -> str | None:
    return getattr(args, f"{role}_{what}", None)


def role_given(args: argparse.Namespace, role: str, env: Mapping[str, str] = os.environ) -> bool:
    """Whether the user named a model for ``role`` (a flag or an ``AGENTSPEC_<ROLE>_*`` variable)."""
    prefix = _prefix(role)
    return bool(_flag(args, role, "model") or _flag(args, role, "base_url") or env.get(prefix + "MODEL")
                or env.get(prefix + "BASE_URL"))


@dataclass(frozen=True)
class RolePlan:
    """Each role's model: an endpoint config, or a local model to serve embedded."""

    endpoints: dict[str, ModelConfig] = field(default_factory=dict)
    embedded: dict[str, str] = field(default_factory=dict)
    """role -> local model name (or path) served by the run's own child server."""

    @property
    def served_models(self) -> list[str]:
        """The distinct local models the child server must load (one server for all embedded roles)."""
        return list(dict.fromkeys(self.embedded.values()))


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    temperature = getattr(args, "temperature", None)
    return {"temperature": temperature} if temperature is not None else {}


def plan_roles(
    args: argparse.Namespace, roles: Mapping[str, str | None], env: Mapping[str, str] = os.environ
) -> RolePlan:
    """Resolve ``roles`` (role -> the local model it gets when nothing is named, or None to leave it out).

    Raises :class:`~agentspec.errors.ConfigError` for an invalid endpoint, or a
    model name that is neither local nor reachable through a base URL.
    """
    endpoints: dict[str, ModelConfig] = {}
    embedded: dict[str, str] = {}
    for role, default in roles.items():
        if not role_given(args, role, env):
            if default is not None:
                embedded[role] = default
            continue
        prefix = _prefix(role)
        spec = _flag(args, role, "model") or env.get(prefix + "MODEL")
        has_endpoint = _flag(args, role, "base_url") or env.get(prefix + "BASE_URL") or env.get("OPENAI_BASE_URL")
        if spec in MODELS and not has_endpoint:
            embedded[role] = spec
            continue
        endpoints[role] = ModelConfig.for_role(role, _flag(args, role, "model"), base_url=_flag(args, role, "base_url"),
                                               env=env, **_overrides(args))
    return RolePlan(endpoints, embedded)


async def preflight(client: ModelClient) -> None:
    """Fail the run at once, with a clear message, when an endpoint is dead or the model unknown."""
    try:
        if client.config.model:
            await client.list_models()
        else:
            await client.resolve_model()
    except ModelRequestError:
        pass  # some endpoints do not serve /models; the first real request will tell
    except ModelUnavailable as exc:
        raise ModelUnavailable(f"model endpoint {client.config.base_url} is not answering: {exc}") from exc


async def open_clients(stack: AsyncExitStack, args: argparse.Namespace, plan: RolePlan) -> dict[str, ModelClient]:
    """A checked client per planned role; starts one embedded server (closed with ``stack``) when any role needs it."""
    configs = dict(plan.endpoints)
    if plan.embedded:
        # Looked up at call time: tests serve a tiny model by replacing embedded_server / DEFAULT_MODELS.
        from agentspec.models import embedded

        served = await stack.enter_async_context(embedded.embedded_server(plan.served_models))
        for role, name in plan.embedded.items():
            configs[role] = ModelConfig(base_url=served.base_url, model=served.model_ids[name],
                                        timeout_s=EMBEDDED_TIMEOUT_S, max_retries=0, **_overrides(args))
    clients: dict[str, ModelClient] = {}
    for role, config in configs.items():
        clients[role] = await stack.enter_async_context(ModelClient(config))
        await preflight(clients[role])
    return clients
