"""A stdio MCP server inside the Docker sandbox: one copy per container, so its state-changing tools run in forks
and reach the live container only by commit; its runtime (the MCP SDK, the server's file) is a derived image."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sandbox_support import PROCESS_LIST
from test_mcp import FAULTY, NOTES, call

from agentspec.errors import ConfigError
from agentspec.mcp import MCPDockerToolkit, MCPToolkit
from agentspec.types import Effect

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

READ_NOTES = "import json, pathlib; print(json.dumps({p.name: p.read_text() for p in sorted(pathlib.Path().glob('*.note'))}))"


def _inside(client: Any, container: str, code: str) -> str:
    """What ``python3 -c code`` prints in ``container``'s /workspace, as the sandbox user (not through the server)."""
    result = client.api.exec_create(container, ["python3", "-I", "-S", "-c", code], user="1000:1000", workdir="/workspace")
    output = client.api.exec_start(result["Id"]).decode()
    return str(output)


def notes_in(client: Any, container: str) -> dict[str, str]:
    return dict(json.loads(_inside(client, container, READ_NOTES)))


async def test_mutating_calls_stay_in_their_fork_until_commit(docker_client: Any, dev_image: str, tmp_path: Path) -> None:
    (tmp_path / "old.note").write_text("from the source")
    tools = MCPToolkit.stdio("python", NOTES, sandbox="docker", source=tmp_path, image=dev_image, client=docker_client)
    assert isinstance(tools, MCPDockerToolkit)
    async with tools:
        assert tools.effect("add_note") is Effect.MUTATING and tools.effect("delete_note") is Effect.MUTATING
        assert tools.effect("list_notes") is Effect.READ_ONLY
        assert tools.isolation["network"] == "none" and tools.isolation["servers"] == "one per container"
        image = docker_client.api.inspect_image(tools.image)
        assert image["Config"]["Labels"]["agentspec.image"] == "agentspec-mcp"  # labelled as ours, never swept
        live = tools.live_container

        box = await tools.fork(await tools.snapshot())
        assert (await box.execute(call("add_note", text="milk", name="new"))).content == "saved note new"
        assert (await box.execute(call("delete_note", name="old"))).content == "deleted note old"
        assert (await box.execute(call("list_notes"))).content == "new: milk"
        # Live's server, and live's files, are untouched by the fork.
        assert (await tools.execute(call("list_notes"))).content == "old: from the source"
        assert notes_in(docker_client, live) == {"old.note": "from the source"}

        # A second fork sees neither the first's writes nor is seen by it; discarding it drops its writes.
        other = await tools.fork(await tools.snapshot())
        assert (await other.execute(call("add_note", text="never", name="gone"))).content == "saved note gone"
        assert (await other.execute(call("list_notes"))).content == "gone: never\nold: from the source"
        assert (await box.execute(call("list_notes"))).content == "new: milk"
        await tools.discard(other)

        await tools.commit(box)
        assert notes_in(docker_client, tools.live_container) == {"new.note": "milk"}
        assert (await tools.execute(call("list_notes"))).content == "new: milk"
        # After the commit, a new fork starts from the committed state (a commit of the promoted container).
        again = await tools.fork(await tools.snapshot())
        assert (await again.execute(call("read_note", name="new"))).content == "milk"
        mine = {tools.live_container, again.container_id}
    left = docker_client.api.containers(all=True, filters={"label": "agentspec.sandbox"})
    assert not mine & {info["Id"] for info in left}  # every container of the toolkit is gone
    assert notes_in_dir(tmp_path) == {"old.note": "from the source"}  # the source is never written


def notes_in_dir(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(root.glob("*.note"))}


async def test_a_hung_or_crashed_server_gives_one_error_and_is_replaced(docker_client: Any, dev_image: str) -> None:
    tools = MCPToolkit.stdio("python", FAULTY, sandbox="docker", env={"FAULTY_LOG": "/tmp/calls.log"},
                             call_timeout_s=1.5, image=dev_image, client=docker_client)
    seen = []
    async with tools:
        assert isinstance(tools, MCPDockerToolkit)
        for name in ("ping", "hang", "ping", "crash", "ping"):
            observation = await tools.execute(call(name))
            seen.append((name, observation.error, observation.content))
        log = _inside(docker_client, tools.live_container, "print(open('/tmp/calls.log').read())").split()
        processes = _inside(docker_client, tools.live_container, PROCESS_LIST).splitlines()
    assert [error for _, error, _ in seen] == [False, True, False, True, False]
    assert all(text == "pong" for name, _, text in seen if name == "ping")
    assert "gave no answer to 'hang' within 1.5s" in seen[1][2]
    assert "exited during the call to 'crash'" in seen[3][2]
    assert all(text.startswith("Error: ") and "Traceback" not in text for _, error, text in seen if error)
    assert log.count("start") == 3  # the hung and the crashed server were each replaced once
    # The hung server was killed inside its container, not just abandoned: one server runs there.
    assert sum("faulty_server.py" in line for line in processes) == 1, processes


async def test_a_command_the_image_does_not_have_is_refused(docker_client: Any, dev_image: str) -> None:
    tools = MCPToolkit.stdio("no-such-mcp-server", "--stdio", sandbox="docker", image=dev_image, client=docker_client)
    with pytest.raises(ConfigError) as caught:
        async with tools:
            pass
    message = str(caught.value)
    assert "'no-such-mcp-server' is not in the sandbox image" in message and "\n" not in message
