"""Orchestrator rules: routing, stops, error and step limits, solo mode."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
import pytest

from agentspec.bench.tau2.orchestrator import GREETING, Orchestrator
from agentspec.types import InvalidToolCall, Message, TerminationReason, ToolCall

AIRPLANE_TASK = "[service_issue]airplane_mode_on[PERSONA:None]"


@dataclass
class Canned:
    """A test party that says the given messages in order, then repeats the last one."""

    role: str
    messages: list[Message]
    stop_text: str | None = None
    seen: list[int] = field(default_factory=list)

    async def act(self, trajectory):
        self.seen.append(len(trajectory))
        return self.messages.pop(0) if len(self.messages) > 1 else self.messages[0]

    def is_stop(self, message):
        return self.stop_text is not None and message.content == self.stop_text


def say(role, text):
    return Message(role=role, content=text)


def call(role, name, **arguments):
    return Message(role=role, tool_calls=[ToolCall(name=name, arguments=arguments)])


def run(bench, agent, user, *, solo=False, task_id=AIRPLANE_TASK, **limits):
    task = bench.task(task_id)
    env = bench.environment(task, solo=solo)
    return anyio.run(Orchestrator(task.id, env, agent, user, **limits).run)


def test_greeting_user_tool_call_and_stop(bench):
    agent = Canned("assistant", [say("assistant", "Please toggle airplane mode.")])
    user = Canned("user", [say("user", "help"), call("user", "toggle_airplane_mode"), say("user", "fixed ###STOP###")])
    traj = run(bench, agent, user)
    assert traj.messages[0].content == GREETING
    assert traj.termination is TerminationReason.USER_STOP
    roles = [m.role for m in traj.messages]
    assert roles == ["assistant", "user", "assistant", "user", "tool", "user"]
    assert traj.messages[4].requestor == "user" and not traj.messages[4].error
    assert traj.steps == 5  # greeting is not a step


@pytest.mark.parametrize("token", ["###TRANSFER###", "###OUT-OF-SCOPE###"])
def test_other_user_stop_tokens(bench, token):
    traj = run(bench, Canned("assistant", [say("assistant", "ok")]), Canned("user", [say("user", f"bye {token}")]))
    assert traj.termination is TerminationReason.USER_STOP


def test_wrong_owner_is_an_error_observation_not_a_crash(bench):
    user = Canned("user", [call("user", "get_customer_by_id", customer_id="C1001"), say("user", "###STOP###")])
    traj = run(bench, Canned("assistant", [say("assistant", "ok")]), user)
    tool_message = traj.messages[2]
    assert tool_message.error and "not found" in tool_message.content
    assert traj.num_errors == 1 and traj.termination is TerminationReason.USER_STOP


def test_too_many_errors_ends_the_episode(bench):
    agent = Canned("assistant", [call("assistant", "get_customer_by_id", customer_id="NOPE")])
    traj = run(bench, agent, Canned("user", [say("user", "hi")]), max_errors=3)
    assert traj.termination is TerminationReason.TOO_MANY_ERRORS
    assert traj.num_errors == 3


def test_several_failing_calls_in_one_message_each_count(bench):
    bad = Message(role="assistant", tool_calls=[ToolCall(name="nope", arguments={}), ToolCall(name="nope2", arguments={})])
    traj = run(bench, Canned("assistant", [bad, say("assistant", "ok")]), Canned("user", [say("user", "hi")]), max_errors=2)
    assert traj.termination is TerminationReason.TOO_MANY_ERRORS and traj.num_errors == 2


def test_max_steps_overrides_a_stop_on_the_same_step(bench):
    user = Canned("user", [say("user", "hi"), say("user", "###STOP###")])
    traj = run(bench, Canned("assistant", [say("assistant", "ok")]), user, max_steps=3)
    assert traj.steps == 3
    assert traj.termination is TerminationReason.MAX_STEPS


def test_text_plus_tool_calls_is_a_tool_call_message(bench):
    mixed = Message(role="assistant", content="let me look", tool_calls=[ToolCall(name="get_customer_by_id", arguments={"customer_id": "C1001"})])
    agent = Canned("assistant", [mixed, say("assistant", "done")])
    traj = run(bench, agent, Canned("user", [say("user", "hi"), say("user", "###STOP###")]))
    assert traj.messages[3].role == "tool" and traj.messages[3].requestor == "assistant"
    assert not traj.messages[3].error


def test_invalid_tool_call_becomes_an_error_observation(bench):
    bad = Message(role="assistant", invalid_tool_calls=[InvalidToolCall(name="get_customer_by_id", raw_arguments="{oops", error="bad json")])
    traj = run(bench, Canned("assistant", [bad, say("assistant", "sorry")]), Canned("user", [say("user", "hi"), say("user", "###STOP###")]))
    assert traj.messages[3].error and "not a valid JSON object" in traj.messages[3].content
    assert traj.num_errors == 1


def test_empty_message_is_a_protocol_error(bench):
    traj = run(bench, Canned("assistant", [Message(role="assistant")]), Canned("user", [say("user", "hi")]))
    assert traj.termination is TerminationReason.AGENT_ERROR


def test_agent_stop_only_when_the_party_says_so(bench):
    user = Canned("user", [say("user", "hi"), say("user", "###STOP###")])
    traj = run(bench, Canned("assistant", [say("assistant", "###STOP###")]), user)
    assert traj.termination is TerminationReason.USER_STOP  # an LLM agent cannot stop
    traj = run(bench, Canned("assistant", [say("assistant", "###STOP###")], stop_text="###STOP###"), Canned("user", [say("user", "hi")]))
    assert traj.termination is TerminationReason.AGENT_STOP


def test_solo_mode(bench):
    done_with_extra = Message(role="assistant", tool_calls=[ToolCall(name="toggle_airplane_mode"), ToolCall(name="done")])
    traj = run(bench, Canned("assistant", [call("assistant", "check_status_bar"), done_with_extra]), None, solo=True)
    assert traj.messages[0].tool_calls[0].name == "check_status_bar"  # no greeting
    assert traj.messages[-1].content == "###STOP###" and not traj.messages[-1].tool_calls
    assert traj.termination is TerminationReason.AGENT_STOP
    assert [c.name for _, c in traj.tool_calls()] == ["check_status_bar"]  # calls beside `done` are dropped


def test_solo_text_message_is_an_agent_error(bench):
    traj = run(bench, Canned("assistant", [say("assistant", "hello?")]), None, solo=True)
    assert traj.termination is TerminationReason.AGENT_ERROR


def test_normal_mode_requires_a_user(bench):
    task = bench.task(AIRPLANE_TASK)
    with pytest.raises(ValueError, match="user simulator"):
        Orchestrator(task.id, bench.environment(task), Canned("assistant", [say("assistant", "x")]), None)
