"""GAIA's Python tool in a sandbox: forks isolate it, the reading tools ride along, the virtual clock stays honest,
and a model agent answers through it (our own GAIA-format fixtures, tests/data/gaia-format)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest
from sandbox_support import needs_bwrap  # noqa: F401 - a fixture the sandboxed tests take

import agentspec
from agentspec import RunSpec, ToolCall
from agentspec.cli import main
from agentspec.runtime.real_time import RealTime, real_time_backend
from envs.gaia.bench import GaiaBench

FIXTURES = Path(__file__).resolve().parent / "data" / "gaia-format"


def python(code: str) -> ToolCall:
    return ToolCall(name="run_python", arguments={"code": code})


@pytest.mark.usefixtures("needs_bwrap")
@pytest.mark.anyio
async def test_a_speculative_python_run_stays_in_its_fork_until_committed():
    bench = GaiaBench.from_data_dir(FIXTURES, backend="overlay")
    task = bench.task("ours-0012")
    async with bench.open_backend(task, solo=True) as live:
        assert {s.name for s in live.tool_specs()} == {"read_attachment", "web_search", "fetch_page", "run_python"}
        box = await live.fork(await live.snapshot())
        wrote = await box.execute(python("open('draft.txt', 'w').write('x'); print(open('numbers.txt').read())"))
        assert not wrote.error and "92" in wrote.content  # the attachment is in the sandbox's folder
        token = box.token
        assert "3 14 15" in (await box.execute(ToolCall(name="read_attachment"))).content
        assert box.token == token  # a stateless reading tool gives the fork no new state
        listing = "import os; print(sorted(os.listdir('.')))"
        assert "draft.txt" not in (await live.execute(python(listing))).content  # live never saw the draft
        await live.discard(box)

        box = await live.fork(await live.snapshot())
        await box.execute(python("open('kept.txt', 'w').write('y')"))
        await live.commit(box)
        assert "kept.txt" in (await live.execute(python(listing))).content
        shell = await live.execute(ToolCall(name="run_shell", arguments={"command": "id"}))
        assert shell.error and "unknown tool 'run_shell'" in shell.content  # the workspace keeps its shell to itself


@pytest.mark.usefixtures("needs_bwrap")
def test_sandbox_calls_take_real_time_on_the_virtual_clock():
    """A simulated model sleeping 1000 s (virtual) must not make the clock jump over a sandbox call in flight."""
    from trio.testing import MockClock

    bench = GaiaBench.from_data_dir(FIXTURES, backend="overlay")
    task = bench.task("ours-0012")
    slow = python("import time; time.sleep(0.3); print('finished')")

    async def episode(guarded: bool) -> tuple[str, float]:
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.sleep, 1000)  # another episode's model, on the virtual clock
            opening = bench.open_backend(task, solo=True)
            async with (real_time_backend(opening) if guarded else opening) as live:
                started = anyio.current_time()
                observed = await live.execute(slow.model_copy(update={"arguments": {**slow.arguments, "timeout_s": 5}}))
                elapsed = anyio.current_time() - started
            group.cancel_scope.cancel()
        return observed.content, elapsed

    def on_virtual_clock(guarded: bool) -> tuple[str, float]:
        return anyio.run(episode, guarded, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})

    content, elapsed = on_virtual_clock(guarded=True)
    assert content.strip() == "finished" and 0.25 < elapsed < 30
    content, elapsed = on_virtual_clock(guarded=False)
    assert "finished" not in content and elapsed >= 5  # unguarded: the clock jumped past the call's deadline


def test_real_time_nests_and_restores_the_clock():
    from trio.testing import MockClock

    clock = MockClock(autojump_threshold=0)
    guard = RealTime(clock)
    with guard.running():
        with guard.running():
            assert clock.rate == 1.0 and clock.autojump_threshold == float("inf")
        assert clock.rate == 1.0  # the outer piece of work is still in flight
    assert clock.rate == 0.0 and clock.autojump_threshold == 0


@pytest.mark.docker
def test_python_runs_in_docker_containers_under_every_mode(dev_image, docker_client):
    bench = GaiaBench.from_data_dir(FIXTURES)
    bench.sandbox_options.update(image=dev_image, client=docker_client)
    assert bench.sandbox == "docker"
    spec = RunSpec.of(agent="oracle", modes="sequential,sa", speculator_model="noisy-oracle:1.0",
                      task_ids=["ours-0012", "ours-0009"], latency_model="smc-paper", progress=False)
    results = agentspec.run(spec, bench=bench)
    assert results.summary.as_dict()["clock"].startswith("virtual")
    for mode, records in results.episodes.items():
        assert [e.reward for e in records] == [1.0, 1.0], mode
    sa = results.records("sa")[0]
    assert sa["execution"]["metrics"]["speculative_tool_calls"] > 0 and "28506" in json.dumps(sa["messages"])


@pytest.mark.usefixtures("needs_bwrap")
def test_a_model_agent_answers_with_done_or_a_final_answer_line(capsys, tmp_path):
    """An OpenAI-compatible endpoint as agent and speculator: it reads the pdf and calls done; it runs Python and
    replies ``FINAL ANSWER: ...`` in text."""
    from scripted_openai_server import ScriptedOpenAIServer

    def responder(request):
        system = request["messages"][0]["content"]
        tools = [m["content"] for m in request["messages"] if m["role"] == "tool"]
        assert {t["function"]["name"] for t in request["tools"]} >= {"read_attachment", "run_python", "done"}
        if "invoice" in system:
            if not tools:
                return {"tool_calls": [{"name": "read_attachment", "arguments": {}}]}
            code = re.search(r"Reference code: (\S+)", tools[-1]).group(1)
            return {"tool_calls": [{"name": "done", "arguments": {"answer": code}}]}
        if not tools:
            code = "print(sum(int(n) ** 2 for n in open('numbers.txt').read().split()))"
            return {"tool_calls": [{"name": "run_python", "arguments": {"code": code}}]}
        return {"content": f"The program printed it.\nFINAL ANSWER: {tools[-1].strip()}"}

    with ScriptedOpenAIServer(responder, models=("agent",)) as srv:
        code = main(["run", "--json", "--bench", "gaia", "--data-dir", str(FIXTURES), "--backend", "overlay", "--no-progress",
                     "--task-ids", "ours-0009,ours-0012", "--mode", "sequential,sa", "--agent-model",
                     f"{srv.base_url}#agent", "--speculator-model", f"{srv.base_url}#agent", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    for mode in ("sequential", "sa"):
        assert summary["modes"][mode]["accuracy"] == 1.0, mode
    answers = [json.loads(line) for line in (tmp_path / "submission-sa.jsonl").read_text().splitlines()]
    assert answers == [{"task_id": "ours-0009", "model_answer": "KV-2291"},
                       {"task_id": "ours-0012", "model_answer": "28506"}]


@pytest.mark.usefixtures("needs_bwrap")
def test_macros_mined_on_the_questions_drive_smc(capsys, tmp_path):
    """`agentspec mine --bench gaia` labels macros through the sandboxed backend; `--mode smc` commits one."""
    library = tmp_path / "gaia-macros.json"
    code = main(["mine", "--bench", "gaia", "--data-dir", str(FIXTURES), "--backend", "overlay", "--split",
                 "validation", "--speculator-model", "noisy-oracle:0.9", "--out", str(library), "--no-progress"])
    mined = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and mined["trajectories"]["gold"] == 12 and mined["funnel"]["kept"] >= 1
    code = main(["run", "--json", "--bench", "gaia", "--data-dir", str(FIXTURES), "--backend", "overlay", "--agent", "oracle",
                 "--mode", "smc", "--speculator-model", "noisy-oracle:0.8", "--macros", str(library),
                 "--latency-model", "smc-paper", "--no-progress"])
    smc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["modes"]["smc"]
    assert code == 0 and smc["accuracy"] == 1.0 and smc["commits_macro"] >= 1
