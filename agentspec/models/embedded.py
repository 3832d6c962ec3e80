"""The embedded backend: a child ``agentspec serve`` on a free loopback port, for as long as a block runs.

When a run is given no model endpoint, it serves local models itself::

    async with embedded_server(["qwen2.5-coder-0.5b"]) as served:
        config = ModelConfig(base_url=served.base_url, model=served.model_ids["qwen2.5-coder-0.5b"])
        ...

The child binds port 0 (so no port race), pulls a registry model on first use,
and announces its URL and served ids (a folder is served under its name) with a
``{"event": "ready", ...}`` line on stdout; its
stderr (progress, errors) is the parent's.  Leaving the block terminates it
(SIGTERM, then SIGKILL after ``stop_timeout_s``), also on error or
cancellation.  The child also dies with this process when nothing gets to
leave the block (``kill -9``): it is told this process's pid and watches a
pipe only this process holds (:mod:`agentspec.serve.lifeline`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import Process

from agentspec.errors import ModelUnavailable

__all__ = ["DEFAULT_MODELS", "EmbeddedServer", "PARENT_ENV", "embedded_server", "served_models"]

PARENT_ENV = "AGENTSPEC_PARENT_PID"
"""Names the pid of the process the child server must not outlive (read by :mod:`agentspec.serve.lifeline`)."""

DEFAULT_MODELS: dict[str, str] = {
    "agent": "qwen2.5-coder-0.5b",
    "user": "qwen2.5-coder-0.5b",
    "speculator": "smollm2-135m",
}
"""The local model each role gets when no endpoint is given (see docs/serving.md, "Local models")."""


@dataclass(frozen=True, slots=True)
class EmbeddedServer:
    """A running child server: its base URL, the id it serves each requested model under, and its pid."""

    base_url: str
    model_ids: dict[str, str]
    pid: int | None
    """None for a server this process did not start (:func:`served_models` with a ``base_url``)."""


@asynccontextmanager
async def embedded_server(
    models: list[str], *, max_tokens: int | None = None, decoder: str = "greedy", startup_timeout_s: float = 3600,
    stop_timeout_s: float = 20,
) -> AsyncIterator[EmbeddedServer]:
    """Serve ``models`` (names or paths, deduplicated) from a child process while the block runs.

    ``max_tokens`` is the server's completion cap for requests that set none;
    ``decoder`` is ``agentspec serve --decoder`` (``greedy`` or ``toolspec``).
    """
    unique = list(dict.fromkeys(models))
    command = [sys.executable, "-m", "agentspec.cli", "serve", "--host", "127.0.0.1", "--port", "0", "--decoder", decoder]
    if max_tokens is not None:
        command += ["--max-tokens", str(max_tokens)]
    for model in unique:
        command += ["--model", model]
    # The child's stdin is a pipe nobody writes to: it reaches end of file when this process is gone.
    env = {**os.environ, PARENT_ENV: str(os.getpid())}
    process = await anyio.open_process(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env)
    try:
        with anyio.fail_after(startup_timeout_s):
            ready = await _wait_ready(process)
        model_ids = dict(zip(unique, map(str, ready["models"]), strict=True))
        yield EmbeddedServer(str(ready["base_url"]), model_ids, process.pid)
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process, stop_timeout_s)


async def _wait_ready(process: Process) -> dict[str, Any]:
    """Read the child's stdout until its ready line; :class:`ModelUnavailable` if it exits first."""
    assert process.stdout is not None
    buffer = b""
    async for chunk in process.stdout:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict) and event.get("event") == "ready":
                return event
    code = await process.wait()
    raise ModelUnavailable(
        f"the embedded model server exited (code {code}) before it was ready; see its messages above"
    )


async def _stop(process: Process, timeout_s: float) -> None:
    if process.returncode is None:
        process.terminate()
        with anyio.move_on_after(timeout_s):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
    await process.aclose()


@asynccontextmanager
async def served_models(models: list[str], *, base_url: str | None = None, **serve: Any) -> AsyncIterator[EmbeddedServer]:
    """``models`` from a child server (:func:`embedded_server`, given ``serve``'s options), or from the server at
    ``base_url`` that the caller already runs, which serves each under its own name."""
    if base_url is None:
        async with embedded_server(models, **serve) as served:
            yield served
    else:
        yield EmbeddedServer(base_url, {name: name for name in models}, None)
