"""Which model answers each role of a run (agent, user, speculators), and the clients that reach them.

Every way to start a run (``run``, ``run --mode``, ``mine``, a Ray worker, the experiments) opens its roles
with :func:`open_roles`, so a flag means the same thing everywhere.  ``--ROLE-model`` is
an endpoint (``URL``, ``URL#MODEL``, or a name with ``--ROLE-base-url`` /
``AGENTSPEC_ROLE_BASE_URL`` / ``OPENAI_BASE_URL``), or a local model name
from :data:`agentspec.models.registry.MODELS` with no endpoint anywhere: that
role is served embedded, and the roles naming the same local model share one
child server::

    >>> spec = RunSpec(agent_model="qwen2.5-coder-0.5b", speculator_model="qwen2.5-coder-0.5b")
    >>> plan = plan_roles(spec, {"agent": None, "speculator": None}, env={})
    >>> plan.embedded, plan.served_models, plan.endpoints
    ({'agent': 'qwen2.5-coder-0.5b', 'speculator': 'qwen2.5-coder-0.5b'}, ['qwen2.5-coder-0.5b'], {})

    async with open_roles(spec, solo=True) as roles:   # the clients, closed (and the server stopped) on leaving
        roles.clients["agent"]
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentspec.errors import ConfigError, ModelRequestError, ModelUnavailable
from agentspec.models import ModelClient, ModelConfig
from agentspec.models.cassette import Cassette
from agentspec.models.registry import MODELS
from agentspec.run_spec import RunSpec, role_given, role_prefix
from agentspec.runtime.modes import noisy_oracle_p

if TYPE_CHECKING:
    from agentspec.runtime.policies.protocol import Policy

__all__ = ["SPECULATOR_PRIORITY", "GivenRole", "OpenRoles", "PolicyMaker", "RolePlan", "open_clients", "open_roles", "plan_roles", "preflight",
           "role_defaults", "role_given", "role_model", "run_roles", "settle_hints", "speculator_roles"]

EMBEDDED_TIMEOUT_S = 3600
"""CPU generation is slow: a long timeout, and no retry that would redo a long generation."""


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

    def __bool__(self) -> bool:
        return bool(self.endpoints or self.embedded)


# --- which roles a run has ------------------------------------------------------------------


def _is_model(speculator: str) -> bool:
    """Whether a further speculator is a model endpoint (it needs a client), not a scripted or fitted one."""
    return noisy_oracle_p(speculator) is None and speculator.partition(":")[0] != "learned"


def speculator_roles(spec: RunSpec) -> dict[str, str]:
    """Role name -> model of each further speculator that is a model (``speculator2``, ``speculator3``...)."""
    return {f"speculator{i}": model for i, model in enumerate(spec.more_speculators, 2) if _is_model(model)}


def role_defaults(spec: RunSpec, solo: bool) -> dict[str, str | None]:
    """The roles a run needs, each with the local model it gets when none is named (None: must be named)."""
    from agentspec.models.embedded import DEFAULT_MODELS

    roles: dict[str, str | None] = {}
    if spec.agent == "llm":
        roles["agent"] = DEFAULT_MODELS["agent"]
        if not solo:
            roles["user"] = DEFAULT_MODELS["user"] if not spec.role_named("agent") else None
    if spec.needs_speculator and spec.noisy_p is None and spec.learned_path is None:
        roles["speculator"] = None
    return roles


def run_roles(spec: RunSpec, solo: bool) -> dict[str, str | None]:
    """Every role ``spec`` opens a client for: :func:`role_defaults` and each further model speculator."""
    return role_defaults(spec, solo) | dict.fromkeys(speculator_roles(spec))


def _named(spec: RunSpec, role: str) -> tuple[str | None, str | None]:
    """The model and base URL ``spec`` names for ``role`` (a further speculator ``speculatorN``: its model)."""
    more = speculator_roles(spec)
    if role in more:
        return more[role], None
    return getattr(spec, f"{role}_model", None), getattr(spec, f"{role}_base_url", None)


SPECULATOR_PRIORITY = 1
"""vLLM's ``priority`` of an embedded speculator's requests: the embedded server runs them only while the
authority's model is idle (:mod:`agentspec.engine.priority`), so a speculator on the same cores never slows the
authority's decisions."""


def _priority(role: str) -> dict[str, Any]:
    return {"priority": SPECULATOR_PRIORITY} if role.startswith("speculator") else {}


def _overrides(spec: RunSpec) -> dict[str, Any]:
    return {"temperature": spec.temperature} if spec.temperature is not None else {}


def plan_roles(
    spec: RunSpec, roles: Mapping[str, str | None], env: Mapping[str, str] = os.environ
) -> RolePlan:
    """Resolve ``roles`` (role -> the local model it gets when nothing is named, or None to leave it out).

    Raises :class:`~agentspec.errors.ConfigError` for an invalid endpoint, or a
    model name that is neither local nor reachable through a base URL.
    """
    endpoints: dict[str, ModelConfig] = {}
    embedded: dict[str, str] = {}
    for role, default in roles.items():
        model, base_url = _named(spec, role)
        prefix = role_prefix(role)
        if not (model or base_url or env.get(prefix + "MODEL") or env.get(prefix + "BASE_URL")):
            if default is not None:
                embedded[role] = default
            continue
        name = model or env.get(prefix + "MODEL")
        has_endpoint = base_url or env.get(prefix + "BASE_URL") or env.get("OPENAI_BASE_URL")
        if name in MODELS and not has_endpoint:
            embedded[role] = name
            continue
        endpoints[role] = ModelConfig.for_role(role, model, base_url=base_url, env=env, **_overrides(spec))
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


# --- opening them -----------------------------------------------------------------------------


async def open_clients(stack: AsyncExitStack, spec: RunSpec, plan: RolePlan, cassette: Cassette | None = None,
                       *, server: str | None = None) -> dict[str, ModelClient]:
    """A checked client per planned role; starts one embedded server (closed with ``stack``) when any role needs it.

    With a ``cassette``, every client records its completions to it, or (replaying) answers from it: then no
    server starts and no endpoint is asked anything.  ``server``: an ``agentspec serve`` already running that
    serves the embedded roles' local models under their own names, used instead of starting one."""
    if cassette is not None and cassette.mode == "replay":
        clients: dict[str, ModelClient] = {}
        for role in [*plan.endpoints, *plan.embedded]:
            name = role_model(plan, role)
            config = plan.endpoints.get(role) or ModelConfig(base_url=REPLAY_URL, model=name, **_overrides(spec))
            clients[role] = await stack.enter_async_context(ModelClient(config, tape=cassette.for_model(name)))
        return clients
    configs = dict(plan.endpoints)
    if plan.embedded:
        # Looked up at call time: tests serve a tiny model by replacing embedded_server / DEFAULT_MODELS.
        from agentspec.models import embedded

        # ToolSpec: greedy answers token for token, in fewer forwards, and the speculator's guesses reach it.
        if server is None:
            served = await stack.enter_async_context(embedded.embedded_server(plan.served_models, decoder="toolspec"))
        else:
            served = await stack.enter_async_context(embedded.served_models(plan.served_models, base_url=server))
        for role, name in plan.embedded.items():
            configs[role] = ModelConfig(base_url=served.base_url, model=served.model_ids[name],
                                        timeout_s=EMBEDDED_TIMEOUT_S, max_retries=0, extra_body=_priority(role),
                                        **_overrides(spec))
    clients = {}
    for role, config in configs.items():
        tape = cassette.for_model(role_model(plan, role)) if cassette is not None else None
        clients[role] = await stack.enter_async_context(ModelClient(config, tape=tape))
        await preflight(clients[role])
    return clients


@dataclass(frozen=True)
class PolicyMaker:
    """A role given as an endpoint the run opens (checked, recorded or replayed like any role's) and a policy you
    make from its client for each task (the Agents SDK adapter's authority reads the task its own way)."""

    config: ModelConfig
    make: Callable[[ModelClient, Any], Policy]
    """``make(client, task)``: the task's policy."""


GivenRole = ModelConfig | PolicyMaker | Any
"""A role given as an object (the Python API): an endpoint's config, a :class:`PolicyMaker`, or a policy."""


@dataclass(frozen=True)
class OpenRoles:
    """A run's roles, opened: what each one's model is, and its client."""

    spec: RunSpec
    """The spec, with ``speculator_hints`` decided where it was left open (None): on for a local agent model."""
    plan: RolePlan
    clients: dict[str, ModelClient]
    policies: dict[str, Policy | PolicyMaker] = field(default_factory=dict)
    """The roles given as policies of your own (the Python API's), or made per task from their client."""


def cassette_of(spec: RunSpec) -> Cassette | None:
    """The recording ``spec`` writes (``record``) or answers from (``replay``); None for neither."""
    if spec.record:
        return Cassette(Path(spec.record), "record")
    if spec.replay:
        return Cassette(Path(spec.replay), "replay")
    return None


def check_plan(spec: RunSpec, plan: RolePlan, solo: bool) -> None:
    """Refuse a plan the run cannot play: normal mode with an LLM agent needs a user model."""
    if spec.agent == "llm" and not solo and "user" not in plan.endpoints and "user" not in plan.embedded:
        raise ConfigError("normal mode needs --user-model (or AGENTSPEC_USER_MODEL); or pass --solo")


def settle_hints(spec: RunSpec, *, solo: bool, plan: RolePlan | None = None,
                 env: Mapping[str, str] = os.environ) -> RunSpec:
    """``spec`` with ``speculator_hints`` decided where it was left open (None): hints go where they are understood,
    to a local agent model agentspec serves (``plan``: the run's, made here when not given)."""
    if spec.speculator_hints is not None:
        return spec
    plan = plan if plan is not None else plan_roles(spec, run_roles(spec, solo), env)
    return spec.model_copy(update={"speculator_hints": "agent" in plan.embedded})


@asynccontextmanager
async def open_roles(spec: RunSpec, *, solo: bool | None = None, server: str | None = None,
                     env: Mapping[str, str] = os.environ,
                     given: Mapping[str, GivenRole] | None = None) -> AsyncIterator[OpenRoles]:
    """Open every role ``spec`` needs (:func:`run_roles`): one checked client each, with the recording ``spec``
    names, and the embedded server when a role names a local model; all closed on leaving.

    ``solo``: whether the run plays without a user simulator (default ``spec.solo``; a bench without a user
    is solo whatever the spec says).  ``server``: an ``agentspec serve`` already running with the local models
    (see :func:`open_clients`).  ``given``: roles given as objects, not named in the spec (the Python API): a
    :class:`ModelConfig` is opened as an endpoint the spec named would be (checked, recorded or replayed), as is a
    :class:`PolicyMaker`'s; a policy is used as it is.  :class:`~agentspec.errors.ConfigError` before anything opens for a plan that
    cannot run."""
    solo = spec.solo if solo is None else solo
    given = dict(given or {})
    plan = plan_roles(spec, {role: d for role, d in run_roles(spec, solo).items() if role not in given}, env)
    spec = settle_hints(spec, solo=solo, plan=plan)
    plan.endpoints.update({role: source.config if isinstance(source, PolicyMaker) else source
                           for role, source in given.items() if isinstance(source, ModelConfig | PolicyMaker)})
    policies = {role: source for role, source in given.items() if not isinstance(source, ModelConfig)}
    check_plan(spec, plan, solo)
    cassette = cassette_of(spec)
    async with AsyncExitStack() as stack:
        clients = await open_clients(stack, spec, plan, cassette, server=server)
        yield OpenRoles(spec, plan, clients, policies)
