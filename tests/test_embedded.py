"""The embedded backend: a child `agentspec serve` for the duration of a block or of an LLM run."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import anyio
import httpx
import pytest

from agentspec.cli import main
from agentspec.errors import ModelUnavailable
from agentspec.models import ModelClient, ModelConfig
from agentspec.models import embedded
from agentspec.models.embedded import embedded_server
from agentspec.models.registry import pull
from local_models import tiny_model
from agentspec.types import Message

TASK = "[service_issue]airplane_mode_on[PERSONA:None]"


def test_child_server_answers_and_is_gone_afterwards() -> None:
    pull("smollm2-135m")

    async def main_() -> tuple[str, str | None]:
        async with embedded_server(["smollm2-135m", "smollm2-135m"]) as served:
            assert served.model_ids == {"smollm2-135m": "smollm2-135m"}
            async with ModelClient(ModelConfig(base_url=served.base_url, max_tokens=4)) as client:
                result = await client.chat([Message(role="user", content="Hi")])
        return served.base_url, result.model

    base_url, model = anyio.run(main_)
    assert base_url.startswith("http://127.0.0.1:") and model == "smollm2-135m"
    with pytest.raises(httpx.ConnectError):
        httpx.get(base_url + "/models", timeout=2)


def test_a_child_that_cannot_start_is_a_clear_error() -> None:
    async def main_() -> None:
        async with embedded_server(["no-such-model"]):
            raise AssertionError("unreachable")

    with pytest.raises(ModelUnavailable, match="exited"):
        anyio.run(main_)


def test_llm_run_without_endpoints_serves_local_models(tau2_dir: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    # The real defaults are Qwen models (minutes per episode on the CPU); the wiring is the same with a tiny
    # random model given as a folder, which also checks that a local HF folder works as a model.
    tiny = str(tiny_model(tmp_path / "tiny"))
    monkeypatch.setitem(embedded.DEFAULT_MODELS, "agent", tiny)
    monkeypatch.setitem(embedded.DEFAULT_MODELS, "user", tiny)
    monkeypatch.setattr(embedded, "embedded_server", functools.partial(embedded_server, max_tokens=8))
    for variable in ("AGENTSPEC_AGENT_MODEL", "AGENTSPEC_AGENT_BASE_URL", "AGENTSPEC_USER_MODEL", "AGENTSPEC_USER_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    code = main(["run", "--bench", "tau2-telecom", "--agent", "llm", "--task-ids", TASK, "--max-steps", "4",
                 "--data-dir", str(tau2_dir), "--out", str(tmp_path / "out"), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["agent"] == "llm" and summary["episodes"] == 1
    episode = json.loads((tmp_path / "out" / "results.json").read_text())["episodes"][0]
    assert episode["error"] is None, episode["error"]
    assert episode["steps"] > 0 and episode["messages"][1]["role"] == "user"
