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

import os
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from agentspec.errors import ModelRequestError, ModelUnavailable
from agentspec.models import ModelClient, ModelConfig
from agentspec.models.cassette import Cassette
from agentspec.models.registry import MODELS
from agentspec.run_spec import role_given, role_prefix

__all__ = ["RolePlan", "open_clients", "plan_roles", "preflight", "role_given", "role_model"]

EMBEDDED_TIMEOUT_S = 3600
"""CPU generation is slow: a long timeout, and no retry that would redo a long generation."""


def _flag(args: Any, role: str, what: str) -> str | None:
    return getattr(args, f"{role}_{what}", None)


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


def _overrides(args: Any) -> dict[str, Any]:
    temperature = getattr(args, "temperature", None)
    return {"temperature": temperature} if temperature is not None else {}


def plan_roles(
    args: Any, roles: Mapping[str, str | None], env: Mapping[str, str] = os.environ
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
        prefix = role_prefix(role)
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


REPLAY_URL = "http://replay.invalid/v1"
"""Where a replayed role's client points: it never sends a request (its answers come from the recording)."""


def role_model(plan: RolePlan, role: str) -> str:
    """The model ``role`` uses, as the run names it: a local model's name, else the endpoint's model or URL
    (what a recording is keyed by, so a replay of the same flags finds it)."""
    if role in plan.embedded:
        return plan.embedded[role]
    config = plan.endpoints[role]
    return config.model or config.base_url


async def open_clients(stack: AsyncExitStack, args: Any, plan: RolePlan,
                       cassette: Cassette | None = None) -> dict[str, ModelClient]:
    """A checked client per planned role; starts one embedded server (closed with ``stack``) when any role needs it.

    With a ``cassette``, every client records its completions to it, or (replaying) answers from it: then no
    server starts and no endpoint is asked anything."""
    if cassette is not None and cassette.mode == "replay":
        clients: dict[str, ModelClient] = {}
        for role in [*plan.endpoints, *plan.embedded]:
            name = role_model(plan, role)
            config = plan.endpoints.get(role) or ModelConfig(base_url=REPLAY_URL, model=name, **_overrides(args))
            clients[role] = await stack.enter_async_context(ModelClient(config, tape=cassette.for_model(name)))
        return clients
    configs = dict(plan.endpoints)
    if plan.embedded:
        # Looked up at call time: tests serve a tiny model by replacing embedded_server / DEFAULT_MODELS.
        from agentspec.models import embedded

        # ToolSpec: greedy answers token for token, in fewer forwards, and the speculator's guesses reach it.
        served = await stack.enter_async_context(embedded.embedded_server(plan.served_models, decoder="toolspec"))
        for role, name in plan.embedded.items():
            configs[role] = ModelConfig(base_url=served.base_url, model=served.model_ids[name],
                                        timeout_s=EMBEDDED_TIMEOUT_S, max_retries=0, **_overrides(args))
    clients = {}
    for role, config in configs.items():
        tape = cassette.for_model(role_model(plan, role)) if cassette is not None else None
        clients[role] = await stack.enter_async_context(ModelClient(config, tape=tape))
        await preflight(clients[role])
    return clients
