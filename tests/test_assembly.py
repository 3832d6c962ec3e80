"""One assembly for every run: RunSpec, normal-mode speculation with a user simulator, a second bench (workspace-demo)."""

from __future__ import annotations

import json

import anyio
import pytest
from sandbox_support import needs_bwrap  # noqa: F401 - a fixture the workspace tests take

import agentspec
from agentspec import SAY, Bench, ConfigError, Effect, InProcessBackend, Mode, RunSpec, ToolCall, UserTurn
from agentspec.bench.protocol import has_user
from agentspec.cli import main
from agentspec.env import ToolkitEnvironment
from agentspec.runtime.config import ExecutorConfig
from agentspec.runtime.conversation import conversation, say, scripted_turns
from agentspec.runtime.executor import ExecutionLoop
from agentspec.runtime.policies.llm import LLMPolicy, history_messages
from agentspec.runtime.policies.protocol import History
from agentspec.runtime.policies.scripted import NoisyOracleSpeculator, OracleAuthority
from agentspec.tools import Toolkit, tool
from agentspec.types import Message, TerminationReason

SMALL = ["--split", "small", "--agent", "oracle", "--speculator-model", "noisy-oracle:0.8", "--latency-model", "smc-paper"]


def run(capsys, *argv):
    code = main(["run", "--json", "--no-progress", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out.strip().splitlines()[-1])


# --- RunSpec --------------------------------------------------------------------------------


def test_run_spec_parses_modes_once():
    spec = RunSpec.of(bench="tau2-telecom", agent="oracle", modes="sequential,smc+spork,spork",
                      speculator_model="noisy-oracle:0.5")
    assert [m.name for m in spec.modes] == ["sequential", "smc+spork", "spork"]
    assert spec.modes[1] == Mode(base="smc", spork=True) and spec.needs_speculator and spec.noisy_p == 0.5
    assert spec.call_limit == 99 and RunSpec.of(max_calls=7).call_limit == 7


@pytest.mark.parametrize(("fields", "message"), [
    ({"modes": "turbo"}, "unknown mode 'turbo'"),
    ({"modes": "sa", "agent": "oracle"}, "need --speculator-model"),
    ({"modes": "sa", "agent": "llm", "speculator_model": "noisy-oracle:0.8"}, "need the gold calls"),
    ({"speculator_model": "noisy-oracle:1.5", "agent": "oracle"}, "in [0, 1]"),
    ({"resume": True}, "--resume needs --out"),
    ({"depth": 0}, "depth"),
    ({"latency_model": "nope"}, "preset"),
])
def test_run_spec_refuses_an_incoherent_run(fields, message, monkeypatch):
    monkeypatch.delenv("AGENTSPEC_SPECULATOR_MODEL", raising=False)
    monkeypatch.delenv("AGENTSPEC_SPECULATOR_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        RunSpec.of(bench="tau2-telecom", **fields)


def test_the_tau2_harness_is_a_bench(bench):
    assert isinstance(bench, Bench)
    assert has_user(bench) and bench.in_process and bench.default_split == "base"


# --- normal mode ------------------------------------------------------------------------------


def test_scripted_turns_split_the_gold_script_between_agent_and_user():
    a, b, c, d = (ToolCall(name=n) for n in "abcd")
    decisions, turns = scripted_turns([("user", a), ("assistant", b), ("assistant", c), ("user", d)])
    assert [x.name for x in decisions] == ["b", "c", SAY]
    assert turns == [[a], [d]]
    decisions, turns = scripted_turns([("assistant", b)])
    assert decisions == [b] and turns == [[]]
    # Runs of several agent calls between user turns: every decision keeps an id of its own (replays pair each
    # call with its result by id; the ids once repeated after a third call in a run).
    script = [("assistant", a), ("assistant", b), ("assistant", c), ("user", d), ("assistant", a), ("assistant", b)]
    decisions, _ = scripted_turns(script)
    ids = [x.id for x in decisions]
    assert len(set(ids)) == len(ids) == 6, ids


def test_every_mode_runs_in_normal_mode_with_the_oracle(tau2_dir, tmp_path, capsys):
    summary = run(capsys, "--bench", "tau2-telecom", *SMALL, "--mode", "sequential,sa,smc", "--data-dir", str(tau2_dir),
                  "--out", str(tmp_path))
    assert summary["play"] == "normal" and summary["clock"].startswith("virtual")
    modes = summary["modes"]
    for mode in ("sequential", "sa", "smc"):
        assert modes[mode]["reward_mean"] == 1.0 and modes[mode]["tasks"] == 20
        assert modes[mode]["mean_task_wall_s"] > 0
    assert modes["sa"]["commits_sa"] > 0  # the speculator's drafts are confirmed between user turns
    episodes = json.loads((tmp_path / "results.json").read_text())["episodes"]
    for mode, records in episodes.items():
        for record in records:
            messages = record["messages"]
            assert messages[0] == {"role": "assistant", "content": "Hi! How can I help you today?"}
            user_calls = [c["name"] for m in messages if m["role"] == "user" for c in m.get("tool_calls", [])]
            gold_user = [a.name for a in _task(tau2_dir, record["task_id"]).evaluation_criteria.actions if a.requestor == "user"]
            assert user_calls == gold_user, (mode, record["task_id"])
            # A message to the user is never drafted into a fork: only real tools run speculatively.
            assert SAY not in {e["label"] for e in record["execution"]["timeline"] if e["lane"] == "speculator-tool"}


def _task(tau2_dir, task_id):
    from envs.tau2_telecom.bench import TelecomBench

    return TelecomBench.from_data_dir(tau2_dir).task(task_id)


def test_solo_figures_are_unchanged_by_normal_mode(tau2_dir, capsys):
    solo = run(capsys, "--bench", "tau2-telecom", *SMALL, "--solo", "--mode", "sequential,sa", "--data-dir", str(tau2_dir))
    assert solo["play"] == "solo" and all(m["reward_mean"] == 1.0 for m in solo["modes"].values())
    assert solo["modes"]["sa"]["mean_task_wall_s"] < solo["modes"]["sequential"]["mean_task_wall_s"]


class Counter(Toolkit):
    def __init__(self) -> None:
        self.value = 0

    @tool("read_only")
    def read(self) -> int:
        """The value."""
        return self.value

    @tool("mutating")
    def add(self, n: int) -> int:
        """Add n."""
        self.value += n
        return self.value


class AddingUser:
    """A user who adds 10 on their side each turn and stops on the second turn."""

    opening = "hello"

    def __init__(self) -> None:
        self.seen: list[list[Message]] = []

    async def reply(self, said, run_call):
        self.seen.append(said)
        call = ToolCall(name="add", arguments={"n": 10})
        result = await run_call(call)
        messages = [Message(role="user", tool_calls=[call]), Message.from_observation(result)]
        stop = len(self.seen) == 2
        return UserTurn("###STOP###" if stop else "done", [*messages, Message(role="user", content="done")], stop=stop)


def _loop(mode: str, user, script: list[ToolCall], p: float = 1.0):
    backend = InProcessBackend(ToolkitEnvironment(Counter()))
    speculator = NoisyOracleSpeculator(script, p, [ToolCall(name="read")]) if mode != "sequential" else None
    return backend, ExecutionLoop(backend, OracleAuthority(script), speculator, config=ExecutorConfig(mode=mode), user=user)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["sequential", "sa"])
def test_user_turns_run_on_live_state_and_stale_drafts_are_dropped(mode):
    script = [ToolCall(name="add", arguments={"n": 1}), ToolCall(name="read"), say("your turn"),
              ToolCall(name="add", arguments={"n": 2}), ToolCall(name="read")]
    user = AddingUser()
    backend, loop = _loop(mode, user, script)
    result = anyio.run(loop.run)
    # The opening's turn adds 10, then add 1 and read see it; the second turn adds 10 and ends the conversation.
    assert [s.call.name for s in result.steps] == [SAY, "add", "read", SAY]
    assert result.steps[0].call.arguments == {"content": "hello"} and result.steps[0].observation.content == "done"
    assert result.termination is TerminationReason.USER_STOP
    assert result.steps[2].observation.content == "11" and backend.live.toolkit.value == 21
    assert [m.role for m in result.steps[3].observation.turn] == ["user", "tool", "user"]
    assert loop.effect(SAY) is Effect.EXTERNAL
    # The user saw the agent's message as the conversation's last message.
    assert user.seen[1][-1] == Message(role="assistant", content="your turn")


def test_the_user_ending_the_conversation_ends_the_episode():
    script = [say("one"), say("two"), ToolCall(name="read")]
    user = AddingUser()
    _, loop = _loop("sa", user, script)
    result = anyio.run(loop.run)
    assert result.termination is TerminationReason.USER_STOP
    assert [s.call.arguments.get("content") for s in result.steps] == ["hello", "one"]
    messages = conversation(result.steps)
    assert [m.role for m in messages] == ["assistant", "user", "tool", "user", "assistant", "user", "tool", "user"]


def test_a_model_in_normal_mode_writes_text_to_the_user():
    history: History = [(say("hi there"), None)]
    messages = history_messages("sys", history)
    assert messages[1] == Message(role="assistant", content="hi there")

    class Replying:
        async def chat(self, messages, **_):
            from agentspec.models.result import ChatResult

            return ChatResult(message=Message(role="assistant", content="Please restart your phone."))

    policy = LLMPolicy(Replying(), "sys", [], conversation=True, tool_choice="auto")  # type: ignore[arg-type]
    decision = anyio.run(policy.decide, [])
    assert decision.call == say("Please restart your phone.")
    solo = LLMPolicy(Replying(), "sys", [])  # type: ignore[arg-type]
    assert anyio.run(solo.decide, []).text == "Please restart your phone."


# --- a second bench through the same assembly ---------------------------------------------------------


@pytest.mark.usefixtures("needs_bwrap")
def test_workspace_demo_runs_every_mode_through_the_assembly(capsys):
    summary = run(capsys, "--bench", "workspace-demo", "--mode", "sequential,sa", "--agent", "oracle",
                  "--speculator-model", "noisy-oracle:0.8", "--split", "small")
    assert summary["play"] == "solo" and summary["clock"] == "wall" and summary["split"] == "small"
    for mode in ("sequential", "sa"):
        assert summary["modes"][mode]["reward_mean"] == 1.0 and summary["modes"][mode]["tasks"] == 2
    assert summary["modes"]["sa"]["speculator_calls"] > 0


@pytest.mark.usefixtures("needs_bwrap")
def test_workspace_demo_without_mode_runs_sequential(capsys):
    summary = run(capsys, "--bench", "workspace-demo", "--agent", "oracle", "--task-ids", "ws-fix-add")
    assert list(summary["modes"]) == ["sequential"] and summary["modes"]["sequential"]["reward_mean"] == 1.0


def test_workspace_demo_has_no_normal_mode_user(capsys):
    code = main(["run", "--bench", "workspace-demo", "--agent", "llm", "--user-model", "http://127.0.0.1:9/v1",
                 "--mode", "sequential", "--no-progress"])
    assert code == 2 and "no user simulator" in capsys.readouterr().err


@pytest.mark.docker
def test_workspace_demo_runs_in_docker_containers_through_the_api(dev_image, docker_client):
    from envs.workspace.bench import WorkspaceBench

    bench = WorkspaceBench(backend="docker", image=dev_image, client=docker_client)
    spec = RunSpec.of(agent="oracle", modes="sequential,sa", speculator_model="noisy-oracle:1.0",
                      task_ids=["ws-fix-add", "ws-clean-logs"], progress=False)
    results = agentspec.run(spec, bench=bench)
    assert list(results.episodes) == ["sequential", "sa"] and results.summary.as_dict()["clock"] == "wall"
    for mode, records in results.episodes.items():
        assert [e.reward for e in records] == [1.0, 1.0], mode
    sa = [(e.execution or {})["metrics"] for e in results.episodes["sa"]]
    assert sum(m["speculative_tool_calls"] for m in sa) > 0


# --- the speculator's next call as a draft hint for the authority's decoder ------------------------------


def test_the_authority_request_carries_the_speculators_next_call(tau2_dir, capsys):
    from scripted_openai_server import ScriptedOpenAIServer

    plan = ["reset_apn_settings", "reboot_device", "done"]
    authority_bodies = []

    def responder(request):
        made = sum(1 for m in request["messages"] if m["role"] == "tool")
        reply = {"tool_calls": [{"name": plan[min(made, 2)], "arguments": {}}]}
        if request["model"] == "authority":
            authority_bodies.append(request)
            reply["delay_s"] = 0.3  # the speculator is ahead when the authority is asked
            return {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None, "tool_calls": [{"id": f"c{made}", "type": "function", "function": {
                    "name": plan[min(made, 2)], "arguments": "{}"}}]}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 12, "agentspec_decoding": {
                    "target_forwards": 3, "accepted_by_source": {"hint.speculator": 9, "bonus": 3}}}, "delay_s": 0.3}
        return reply

    with ScriptedOpenAIServer(responder, models=("authority", "speculator")) as srv:
        summary = run(capsys, "--bench", "tau2-telecom", "--task-ids", "[service_issue]break_apn_settings[PERSONA:None]",
                      "--solo", "--mode", "sa", "--agent-model", f"{srv.base_url}#authority", "--speculator-model",
                      f"{srv.base_url}#speculator", "--speculator-hints", "--data-dir", str(tau2_dir))
    sa = summary["modes"]["sa"]
    assert sa["reward_mean"] == 1.0 and sa["authority_forwards_per_call"] == 3.0 and sa["authority_hint_tokens"] > 0
    hinted = [b["agentspec_predicted_calls"] for b in authority_bodies if "agentspec_predicted_calls" in b]
    assert hinted and all(len(calls) == 1 and calls[0]["name"] in plan for calls in hinted)


@pytest.mark.usefixtures("needs_bwrap")
def test_mining_labels_through_the_workspace_overlay_backend(tmp_path, capsys):
    """Mining replays the gold calls and forks drafts through the bench's own backend (overlay here)."""
    code = main(["mine", "--bench", "workspace-demo", "--split", "all", "--speculator-model", "noisy-oracle:0.8",
                 "--out", str(tmp_path / "macros.json"), "--no-progress"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and summary["trajectories"]["gold"] == 6 and summary["funnel"]["labels"] > 0
    library = json.loads((tmp_path / "macros.json").read_text())
    assert library["bench"] == "workspace-demo" and all(len(m["steps"]) >= 2 for m in library["macros"])


def test_an_llm_agent_and_an_llm_user_in_normal_mode_through_the_executor(tau2_dir, tmp_path, capsys):
    from scripted_openai_server import ScriptedOpenAIServer

    def responder(request):
        if request["model"] == "agent":  # a text answer is a message to the user
            return {"content": "Please turn off airplane mode."}
        agent_texts = sum(1 for m in request["messages"] if m["role"] == "user")  # the user's view swaps roles
        if agent_texts == 1:
            return {"content": "My phone has no service."}
        if not any(m["role"] == "tool" for m in request["messages"]):
            return {"tool_calls": [{"name": "toggle_airplane_mode", "arguments": {}}]}
        return {"content": "It works now, thanks. ###STOP###"}

    with ScriptedOpenAIServer(responder, models=("agent", "user")) as srv:
        summary = run(capsys, "--bench", "tau2-telecom", "--task-ids", "[service_issue]airplane_mode_on[PERSONA:None]",
                      "--mode", "sequential,sa", "--agent-model", f"{srv.base_url}#agent", "--user-model",
                      f"{srv.base_url}#user", "--speculator-model", f"{srv.base_url}#agent", "--data-dir", str(tau2_dir),
                      "--out", str(tmp_path))
    assert summary["play"] == "normal"
    for mode in ("sequential", "sa"):
        assert summary["modes"][mode]["reward_mean"] == 1.0 and summary["modes"][mode]["terminations"] == {"user_stop": 1}
    record = json.loads((tmp_path / "results.json").read_text())["episodes"]["sa"][0]
    assert [(m["role"], m.get("content")) for m in record["messages"] if not m.get("tool_calls")][:4] == [
        ("assistant", "Hi! How can I help you today?"), ("user", "My phone has no service."),
        ("assistant", "Please turn off airplane mode."), ("tool", record["messages"][4]["content"])]
    assert record["execution"]["metrics"]["speculative_tool_calls"] == 0  # a message to the user is never run ahead
