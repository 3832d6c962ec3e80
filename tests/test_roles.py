"""One way to open a run's roles: :func:`agentspec.roles.open_roles` (run, mine, the Ray worker, the
experiments), from a :class:`RunSpec` only.  Endpoints are real HTTP servers on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from scripted_openai_server import ScriptedOpenAIServer

from agentspec.errors import ConfigError
from agentspec.models import embedded
from agentspec.models.cassette import Cassette
from agentspec.roles import REPLAY_URL, OpenRoles, open_roles, plan_roles, run_roles
from agentspec.run_spec import RunSpec

LOCAL = "qwen2.5-coder-0.5b"


def opened(spec: RunSpec, **options: Any) -> tuple[OpenRoles, dict[str, Any]]:
    """Open ``spec``'s roles and close them again: (the opened roles, each role's client config)."""
    seen: dict[str, Any] = {}

    async def main() -> OpenRoles:
        async with open_roles(spec, **options) as roles:
            seen.update({role: client.config for role, client in roles.clients.items()})
            return roles

    return anyio.run(main), seen


def test_every_model_speculator_is_a_role_the_others_are_not() -> None:
    # A further speculator that is a model gets a client (speculator2...); a scripted or fitted one needs none.
    spec = RunSpec(agent="oracle", modes="sa", speculator_model="http://gpu:8000/v1#a",
                   more_speculators=["http://gpu:8001/v1#b", "noisy-oracle:0.5", "learned:spec.json"])
    assert run_roles(spec, solo=True) == {"speculator": None, "speculator2": None}
    plan = plan_roles(spec, run_roles(spec, solo=True), env={})
    assert {role: (c.base_url, c.model) for role, c in plan.endpoints.items()} == {
        "speculator": ("http://gpu:8000/v1", "a"), "speculator2": ("http://gpu:8001/v1", "b")}


def test_an_llm_agent_brings_its_user_and_a_noisy_speculator_needs_no_client() -> None:
    spec = RunSpec(agent="llm", modes="sequential,sa", speculator_model="http://gpu:8000/v1#s")
    assert run_roles(spec, solo=False) == {"agent": LOCAL, "user": LOCAL, "speculator": None}
    assert run_roles(spec, solo=True) == {"agent": LOCAL, "speculator": None}
    oracle = RunSpec(agent="oracle", modes="sa", speculator_model="noisy-oracle:0.8")
    assert run_roles(oracle, solo=False) == {}


def test_open_roles_opens_checked_clients_for_every_endpoint_role() -> None:
    with ScriptedOpenAIServer(models=("a", "b")) as srv:
        spec = RunSpec(agent="oracle", modes="sa", speculator_model=f"{srv.base_url}#a",
                       more_speculators=[f"{srv.base_url}#b"], temperature=0.7)
        roles, configs = opened(spec, env={})
        assert {role: (c.model, c.temperature) for role, c in configs.items()} == {
            "speculator": ("a", 0.7), "speculator2": ("b", 0.7)}
        assert srv.model_list_requests == 2  # each client checked before the run starts
    assert roles.spec.speculator_hints is False  # no local agent: no draft hints to another server


def test_a_plan_that_cannot_run_is_refused_before_anything_opens() -> None:
    # Port 1 answers nothing: had a client been opened and checked, the error would be a dead endpoint.
    spec = RunSpec(agent="llm", agent_model="http://127.0.0.1:1/v1#m")
    with pytest.raises(ConfigError, match="normal mode needs --user-model"):
        opened(spec, env={})


def test_local_models_come_from_a_running_server_when_one_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_child(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a child server was started although one was given")

    monkeypatch.setattr(embedded, "embedded_server", no_child)
    with ScriptedOpenAIServer(models=(LOCAL,)) as srv:
        spec = RunSpec(agent="llm", solo=True, modes="sa", agent_model=LOCAL, speculator_model=LOCAL)
        roles, configs = opened(spec, server=srv.base_url, env={})
    assert roles.plan.embedded == {"agent": LOCAL, "speculator": LOCAL}
    assert {(c.base_url, c.model, c.timeout_s, c.max_retries) for c in configs.values()} == {
        (srv.base_url, LOCAL, 3600, 0)}  # served by name, with the embedded server's long timeout and no retry
    # The speculator runs only while the authority's model is idle (vLLM's priority: lower first).
    assert configs["speculator"].extra_body == {"priority": 1} and configs["agent"].extra_body == {}
    assert roles.spec.speculator_hints is True  # a local agent agentspec serves understands draft hints


def test_a_replay_opens_no_server_and_asks_no_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "embedded_server", lambda *a, **k: pytest.fail("a replay started a server"))
    Cassette(tmp_path, "record").for_model(LOCAL).store({"messages": [1]}, {"choices": []})
    spec = RunSpec(agent="llm", solo=True, agent_model=LOCAL, replay=str(tmp_path))
    roles, configs = opened(spec, env={})
    assert {role: (c.base_url, c.model) for role, c in configs.items()} == {"agent": (REPLAY_URL, LOCAL)}
    with pytest.raises(ConfigError, match="no responses.jsonl"):
        opened(spec.model_copy(update={"replay": str(tmp_path / "nothing")}), env={})
