"""The Qwen coder models behind the server (marker slow: `pytest -m slow`; CI runs them when time allows)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from local_models import WEATHER_TOOLS, served, validate

pytestmark = pytest.mark.slow

WEATHER = [{"role": "user", "content": "What is the weather in Paris right now? Use celsius."}]


@pytest.fixture(scope="module", params=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def qwen(request: pytest.FixtureRequest) -> Iterator[tuple[str, openai.OpenAI]]:
    with served(request.param) as server:
        with openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=600) as sdk:
            yield request.param, sdk


def ask(qwen: tuple[str, openai.OpenAI], **kwargs: Any) -> Any:
    model, sdk = qwen
    kwargs.setdefault("messages", WEATHER)
    kwargs.setdefault("max_tokens", 60)
    return sdk.chat.completions.create(model=model, temperature=0, **kwargs)


def test_constrained_call_validates_and_picks_the_weather_tool(qwen: tuple[str, openai.OpenAI]) -> None:
    answer = ask(qwen, tools=WEATHER_TOOLS, tool_choice="required")
    call = answer.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    validate(arguments, WEATHER_TOOLS[0]["function"]["parameters"])
    assert "Paris" in arguments["city"]


def test_free_answer_is_parsed_into_a_tool_call_or_text(qwen: tuple[str, openai.OpenAI]) -> None:
    """The coder models write fenced json or <tool_call> blocks; either way the server returns native calls."""
    message = ask(qwen, tools=WEATHER_TOOLS).choices[0].message
    if qwen[0] == "qwen2.5-coder-1.5b":
        assert message.tool_calls and message.tool_calls[0].function.name == "get_weather"
    for call in message.tool_calls or []:
        json.loads(call.function.arguments)
    assert message.tool_calls or message.content


def test_next_turn_reuses_the_conversation_prefix(qwen: tuple[str, openai.OpenAI]) -> None:
    first = ask(qwen, max_tokens=8)
    history = [*WEATHER, {"role": "assistant", "content": first.choices[0].message.content},
               {"role": "user", "content": "And in Rome?"}]
    second = ask(qwen, messages=history, max_tokens=8)
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 2
