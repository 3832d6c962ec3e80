"""``agentspec serve --engine llama-cpp``: llama.cpp's server on the registry's GGUF, as a drop-in endpoint.

The first tests need no llama.cpp (flags, file resolution, the request
rewriting in front of llama.cpp's app, through an in-process fake app).  The
``slow`` ones start the real server on qwen2.5-coder-0.5b (Q4_K_M) and are
skipped, with the reason, when ``llama_cpp`` is not installed or the GGUF is
not pulled.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sandbox_support import needs_bwrap  # noqa: F401 - a fixture the workspace episode takes

from agentspec.cli import build_parser, main
from agentspec.errors import ConfigError
from agentspec.models import ModelClient, ModelConfig
from agentspec.models.registry import MODELS
from agentspec.serve.llama_cpp import (
    ChatExtensions,
    continuation_prompt,
    gguf_path,
    settings_for,
)
from agentspec.types import Message, ToolSpec

MODEL = "qwen2.5-coder-0.5b"


# ---------------------------------------------------------------- without llama.cpp


def test_serve_keeps_the_embedded_engine_by_default_and_accepts_llama_cpp() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve", "--model", "m"]).engine == "embedded"
    assert parser.parse_args(["serve", "--model", "m", "--engine", "llama-cpp"]).engine == "llama-cpp"


def test_an_unknown_engine_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--model", "m", "--engine", "vllm"]) == 2
    assert "invalid choice: 'vllm'" in capsys.readouterr().err


def test_toolspec_decoding_is_refused_on_llama_cpp(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--engine", "llama-cpp", "--model", MODEL, "--decoder", "toolspec"]) == 2
    assert "--engine embedded" in capsys.readouterr().err


def test_a_missing_llama_cpp_gives_the_install_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # what an environment without the extra looks like
    monkeypatch.setitem(sys.modules, "llama_cpp.server", None)
    monkeypatch.setitem(sys.modules, "llama_cpp.server.app", None)
    assert main(["serve", "--engine", "llama-cpp", "--model", MODEL]) == 2
    assert "pip install 'agentspec[llama]'" in capsys.readouterr().err


def test_a_gguf_file_is_served_as_it_is_and_a_folder_is_refused(tmp_path: Path) -> None:
    weights = tmp_path / "tiny-model.gguf"
    weights.write_bytes(b"GGUF")
    assert gguf_path(str(weights)) == weights
    assert settings_for(str(weights), weights)["model_alias"] == "tiny-model"
    with pytest.raises(ConfigError, match="--engine embedded"):
        gguf_path(str(tmp_path))


def test_a_chunked_registry_model_not_pulled_names_the_pull_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = replace(MODELS[MODEL], name="made-up-model", packages=("made-up-part1==1.0",),
                      parts=("made_up_part1",), gguf_file="made-up.gguf")
    monkeypatch.setitem(MODELS, "made-up-model", missing)
    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="agentspec models pull made-up-model"):
        gguf_path("made-up-model", install=False)


def test_an_assembled_gguf_is_reused_without_its_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path))
    spec = MODELS[MODEL]
    cached = tmp_path / "gguf" / spec.gguf_file
    cached.parent.mkdir()
    cached.write_bytes(b"GGUF")
    (cached.parent / f"{spec.gguf_file}.sha256").write_text(spec.sha256)
    assert gguf_path(MODEL, install=False) == cached


def test_settings_serve_a_registry_model_under_its_name_without_a_logits_matrix(tmp_path: Path) -> None:
    settings = settings_for(MODEL, tmp_path / "x.gguf")
    assert settings["model_alias"] == MODEL and settings["logits_all"] is False
    assert settings["chat_format"] is None  # the GGUF's own template renders the tools


def test_a_continuation_prompt_ends_with_the_unfinished_assistant_text() -> None:
    seen: dict[str, Any] = {}

    def render(messages: list[dict[str, Any]], tools: Any) -> str:
        seen["roles"], seen["tools"] = [m["role"] for m in messages], tools
        return "PROMPT|"

    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": '```json\n{"name": "'}]
    assert continuation_prompt(render, messages, [{"type": "function"}]) == 'PROMPT|```json\n{"name": "'
    assert seen == {"roles": ["system", "user"], "tools": [{"type": "function"}]}
    with pytest.raises(ValueError, match="last assistant message"):
        continuation_prompt(render, messages[:2], None)


class _RecordingApp:
    """Stands in for llama-cpp-python's app: records the body it is given and answers a fixed completion."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.bodies.append(json.loads(message["body"]))
        declared = dict(scope["headers"])[b"content-length"]
        assert int(declared) == len(message["body"])
        data = b'{"choices": []}'
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})


def _post(app: Any, body: dict[str, Any]) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await client.post("/v1/chat/completions", json=body)

    return anyio.run(go)


def test_requests_get_greedy_semantics_and_lose_fields_llama_cpp_cannot_serve() -> None:
    inner = _RecordingApp()
    app = ChatExtensions(inner, get_proxy=lambda: None, default_max_tokens=77)
    _post(app, {"model": "m", "messages": [], "temperature": 0, "logprobs": True, "top_logprobs": 2,
                "agentspec_request_id": "r1", "agentspec_predicted_calls": []})
    _post(app, {"model": "m", "messages": [], "repeat_penalty": 1.3, "max_tokens": 5})
    call = {"id": "c1", "type": "function", "function": {"name": "reboot_device", "arguments": "{}"}}
    _post(app, {"model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": [call]},
                                          {"role": "tool", "tool_call_id": "c1", "content": "done"}]})
    first, second, third = inner.bodies
    assert first == {"model": "m", "messages": [], "temperature": 0, "repeat_penalty": 1.0, "max_tokens": 77}
    assert second["repeat_penalty"] == 1.3 and second["max_tokens"] == 5  # what a request sets wins
    assert third["messages"][0] == {"role": "assistant", "content": "", "tool_calls": [call]}  # null: a 422 there
    assert app.stats == {"chat_requests": 3, "continuations": 0}


# ---------------------------------------------------------------- the real server


def _gguf_or_none() -> Path | None:
    try:
        return gguf_path(MODEL, install=False)
    except ConfigError:
        return None


needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python is not installed (pip install 'agentspec[llama]'; see docs/serving.md, 'llama.cpp')",
)
needs_gguf = pytest.mark.skipif(
    _gguf_or_none() is None, reason=f"the {MODEL} GGUF is not pulled (agentspec models pull {MODEL})"
)


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    """``agentspec serve --engine llama-cpp`` in a child process (dies with this one); its base URL."""
    command = [sys.executable, "-m", "agentspec.cli", "serve", "--engine", "llama-cpp", "--model", MODEL,
               "--port", "0", "--max-tokens", "256"]
    env = {**os.environ, "AGENTSPEC_PARENT_PID": str(os.getpid())}
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    try:
        deadline = time.monotonic() + 300
        assert process.stdout is not None
        for line in process.stdout:
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("event") == "ready":
                assert event["models"] == [MODEL]
                yield str(event["base_url"])
                break
            assert time.monotonic() < deadline, "llama.cpp server did not start in 300 s"
        else:
            pytest.fail(f"agentspec serve --engine llama-cpp exited with {process.wait()} before it was ready")
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[str]) -> None:
    """Close the child's stdin first: its lifeline sees end of file and stops it gracefully."""
    assert process.stdin is not None and process.stdout is not None
    process.stdin.close()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    process.stdout.close()


def _client(base_url: str) -> ModelClient:
    return ModelClient(ModelConfig(base_url=base_url, model=MODEL, timeout_s=300, max_retries=0))


WEATHER = ToolSpec(
    name="get_weather", description="Current weather of a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.mark.slow
@needs_llama
@needs_gguf
def test_a_chat_completion_through_our_client(llama_server: str) -> None:
    async def go() -> Any:
        async with _client(llama_server) as client:
            assert await client.list_models() == [MODEL]
            return await client.chat([Message(role="user", content="Say the word: ready")], max_tokens=8)

    result = anyio.run(go)
    assert result.message.content and result.usage is not None and 0 < result.usage.completion_tokens <= 8


@pytest.mark.slow
@needs_llama
@needs_gguf
def test_a_tool_call_through_our_client(llama_server: str) -> None:
    async def go() -> Any:
        async with _client(llama_server) as client:
            return await client.chat(
                [Message(role="user", content="What is the weather in Paris right now?")],
                tools=[WEATHER], tool_choice="required", max_tokens=64, temperature=0.0,
            )

    result = anyio.run(go)
    calls = result.message.tool_calls
    assert [call.name for call in calls] == ["get_weather"], result.message.content
    assert "paris" in str(calls[0].arguments.get("city", "")).lower()


@pytest.mark.slow
@needs_llama
@needs_gguf
def test_an_unfinished_assistant_message_is_continued_with_logprobs(llama_server: str) -> None:
    """What a SPORK probe sends: the unfinished call is completed, not answered in a new turn."""

    async def go() -> Any:
        async with _client(llama_server) as client:
            return await client.chat(
                [Message(role="user", content="What is the weather in Paris right now?"),
                 Message(role="assistant", content='```json\n{"name": "get_weather", "arguments": {"city": "')],
                tools=[WEATHER], max_tokens=12, temperature=0.0, logprobs=True,
                extra_body={"continue_final_message": True, "add_generation_prompt": False},
            )

    result = anyio.run(go)
    text = "".join(token.token for token in result.logprobs or [])
    assert text.lower().startswith("paris") and all(t.logprob <= 0 for t in result.logprobs or [])


@pytest.mark.slow
@needs_llama
@needs_gguf
def test_a_tau2_solo_episode_with_llama_cpp_as_the_speculator(
    llama_server: str, tau2_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The oracle authority with the llama.cpp model as the speculator (the first 6 messages of one task).

    ``--record`` makes the speculator predict before each authority decision, so
    the real model is asked on every step however fast the oracle is.
    """
    code = main(["run", "--json", "--no-progress", "--bench", "tau2-telecom", "--solo", "--split", "test", "--limit", "1",
                 "--agent", "oracle", "--speculator-model", f"{llama_server}#{MODEL}", "--mode", "sa",
                 "--depth", "1", "--max-steps", "6", "--record", str(tmp_path / "rec"),
                 "--data-dir", str(tau2_dir), "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    sa = json.loads(captured.out.strip().splitlines()[-1])["modes"]["sa"]
    assert sa["failed_episodes"] == 0 and sa["first_error"] is None
    assert sa["speculator_calls"] >= 2 and sa["authority_calls"] >= 2  # the second one after a tool call and result
    assert sa["speculator_name_hit_rate"] is not None  # its predictions were parsed and scored against the gold calls
    assert (tmp_path / "rec" / "responses.jsonl").stat().st_size > 0


@pytest.mark.slow
@needs_llama
@needs_gguf
@pytest.mark.usefixtures("needs_bwrap")
def test_llama_cpp_as_the_authority_in_every_mode(llama_server: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The llama.cpp model as the authority (and the speculator) of a workspace episode in sequential, sa and
    spork: every mode runs to the end and makes the same calls (greedy decoding; speculation changes timing only).

    SPORK runs but cannot overlap here: llama-cpp-python serves one request at a time, so a probe waits for the
    authority's answer to end (docs/serving.md, "llama.cpp")."""
    code = main(["run", "--json", "--no-progress", "--bench", "workspace-demo", "--task-ids", "ws-fix-add", "--backend",
                 "overlay", "--agent-model", f"{llama_server}#{MODEL}", "--speculator-model", f"{llama_server}#{MODEL}",
                 "--mode", "sequential,sa,spork", "--max-steps", "7", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    modes = json.loads(captured.out.strip().splitlines()[-1])["modes"]
    assert all(figures["failed_episodes"] == 0 and figures["authority_calls"] > 0 for figures in modes.values())
    episodes = json.loads((tmp_path / "results.json").read_text())["episodes"]

    def calls(mode: str) -> list[tuple[str, str]]:
        return [(c["name"], json.dumps(c["arguments"], sort_keys=True)) for m in episodes[mode][0]["messages"]
                for c in m.get("tool_calls") or []]

    assert calls("sa") == calls("sequential") == calls("spork")


def test_the_registry_model_used_here_is_a_chunked_q4_gguf() -> None:
    assert MODELS[MODEL].gguf_file.endswith("Q4_K_M.gguf") and MODELS[MODEL].parts


@needs_llama
def test_a_file_llama_cpp_cannot_load_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file")
    assert main(["serve", "--engine", "llama-cpp", "--model", str(broken), "--port", "0"]) == 2
    assert "llama.cpp cannot load" in capsys.readouterr().err
