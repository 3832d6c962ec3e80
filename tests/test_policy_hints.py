"""A speculator's predicted calls reach the authority's request only when the server will take them: a hint too
big to send must never cost the authority its answer (``agentspec serve`` answers 413 to oversize hints)."""

from __future__ import annotations

from typing import Any

from agentspec.runtime.policies.llm import HINT_CALL_BYTES, HINT_CALLS, LLMPolicy, hintable
from agentspec.runtime.policies.protocol import PredictedHistory
from agentspec.serve.protocol import MAX_HINT_BYTES, MAX_HINTS_BYTES, ChatRequest, check_hint_sizes
from agentspec.types import ToolCall


def _call(size: int, name: str = "write") -> ToolCall:
    return ToolCall(name=name, arguments={"text": "x" * size})


def _request(predicted: list[ToolCall]) -> dict[str, Any]:
    policy = LLMPolicy(client=None, system_prompt="s", tools=[], predicted_hints=True)  # type: ignore[arg-type]
    return policy._request(PredictedHistory([], predicted))


def test_an_oversize_predicted_call_is_left_out_and_the_rest_are_sent() -> None:
    small, huge = _call(100, "small"), _call(HINT_CALL_BYTES + 1, "huge")
    sent = _request([huge, small])["extra_body"]["agentspec_predicted_calls"]
    assert [c["name"] for c in sent] == ["small"]


def test_nothing_is_sent_when_no_predicted_call_fits() -> None:
    assert "extra_body" not in _request([_call(HINT_CALL_BYTES + 1)])


def test_what_is_sent_passes_the_servers_hint_bounds() -> None:
    calls = [_call(HINT_CALL_BYTES - 100, f"c{i}") for i in range(HINT_CALLS + 4)]
    kept = hintable(calls)
    assert 0 < len(kept) <= HINT_CALLS
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "agentspec_predicted_calls": [{"name": c.name, "arguments": c.arguments} for c in kept]}
    request = ChatRequest.model_validate(body)
    check_hint_sizes(request.hints())  # raises the server's 413 past MAX_HINT_BYTES / MAX_HINTS_BYTES
    assert HINT_CALL_BYTES < MAX_HINT_BYTES and 4 * HINT_CALL_BYTES <= MAX_HINTS_BYTES
