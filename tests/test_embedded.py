"""The embedded backend: a child `agentspec serve` for the duration of a block or of an LLM run."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
from local_models import tiny_model

from agentspec.cli import main
from agentspec.errors import ModelUnavailable
from agentspec.models import ModelClient, ModelConfig, embedded
from agentspec.models.embedded import PARENT_ENV, embedded_server
from agentspec.models.registry import pull
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
    code = main(["run", "--json", "--bench", "tau2-telecom", "--agent", "llm", "--task-ids", TASK, "--max-steps", "4",
                 "--data-dir", str(tau2_dir), "--out", str(tmp_path / "out"), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["agent"] == "llm" and summary["modes"]["sequential"]["episodes"] == 1
    episode = json.loads((tmp_path / "out" / "results.json").read_text())["episodes"]["sequential"][0]
    assert episode["error"] is None, episode["error"]
    assert episode["steps"] > 0 and episode["messages"][1]["role"] == "user"


PARENT = """
import json, sys, anyio
from agentspec.models.embedded import embedded_server

async def main() -> None:
    async with embedded_server([sys.argv[1]]) as served:
        print(json.dumps({"pid": served.pid, "base_url": served.base_url}), flush=True)
        await anyio.sleep_forever()

anyio.run(main)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _refused_within(base_url: str, seconds: float) -> bool:
    """Whether connecting to ``base_url`` is refused (the socket is closed), waiting up to ``seconds``.

    A killed multi-threaded process shows as a zombie before its last thread has closed its files.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            httpx.get(base_url + "/models", timeout=2)
        except httpx.ConnectError:
            return True
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    return False


def test_the_child_server_dies_with_a_parent_killed_by_sigkill() -> None:
    pull("smollm2-135m")
    child = 0
    with subprocess.Popen([sys.executable, "-c", PARENT, "smollm2-135m"], stdout=subprocess.PIPE, text=True) as parent:
        try:
            assert parent.stdout is not None
            started = json.loads(parent.stdout.readline())
            child, base_url = started["pid"], started["base_url"]
            assert _running(child) and httpx.get(base_url + "/models", timeout=10).status_code == 200
            parent.send_signal(signal.SIGKILL)  # nothing in the parent gets to leave the block
            parent.wait(timeout=10)
            assert _gone_within(child, 5), "the embedded server outlived the process that started it"
            assert _refused_within(base_url, 5), "the embedded server's port is still open"
        finally:
            parent.kill()
            if child and _running(child):
                os.kill(child, signal.SIGKILL)


def test_a_server_whose_parent_is_already_gone_does_not_start() -> None:
    # The parent died between starting the child and the child arming its parent-death signal.
    env = {**os.environ, PARENT_ENV: "1"}
    command = [sys.executable, "-m", "agentspec.cli", "serve", "--model", "smollm2-135m", "--port", "0"]
    done = subprocess.run(command, env=env, stdin=subprocess.PIPE, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "pid 1) is gone" in done.stderr and "Traceback" not in done.stderr


WATCHED = """
import sys, time
from agentspec.serve.lifeline import watch_pipe
watch_pipe(sys.stdin.buffer, grace_s=30)
print("watching", flush=True)
time.sleep(60)
"""


def test_the_pipe_watchdog_stops_the_server_when_the_pipe_closes() -> None:
    # The second guard alone (it is the only one off Linux): end of file on stdin means the parent is gone.
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    with subprocess.Popen([sys.executable, "-c", WATCHED], text=True, **pipes) as child:  # type: ignore[call-overload]
        try:
            assert child.stdout is not None and child.stdout.readline() == "watching\n"
            assert child.stdin is not None
            child.stdin.close()
            assert child.wait(timeout=10) == -signal.SIGTERM
        finally:
            child.kill()


def test_a_server_that_ends_while_its_parent_lives_exits_cleanly() -> None:
    # The watchdog is still blocked on the pipe when the server stops on its own (the parent asked it to, or it
    # finished): interpreter shutdown must not abort on a lock the watchdog holds ("Fatal Python error").
    script = "import sys\nfrom agentspec.serve.lifeline import watch_pipe\nwatch_pipe(sys.stdin.buffer)\nprint('done')\n"
    with subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None and child.stderr is not None
            assert child.wait(timeout=30) == 0, child.stderr.read()
            assert child.stdout.read() == "done\n" and "Fatal" not in child.stderr.read()
        finally:
            child.kill()
