"""Chain verification by a model endpoint (issue 29): LLMPolicy.verify_chain over both wire paths.

A scripted OpenAI-compatible server stands in for endpoints without ``agentspec serve``'s route: one that has no
prompt log-probabilities (smc falls back to the trusted commit and says why), and one that returns vLLM-style
prompt log-probabilities over a toy template (the client finds each call's tokens and reads their ranks).  Against
the real ``agentspec serve`` with qwen2.5-coder-0.5b, a verification equals deciding step by step, on both paths.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import pytest
from scripted_openai_server import ScriptedOpenAIServer

from agentspec.models import ModelClient, ModelConfig
from agentspec.models.cassette import Cassette
from agentspec.models.chain_verification import PromptToken, accepted_by_ranks, support
from agentspec.runtime.chain_verification import ChainVerdict, commit_mode
from agentspec.runtime.policies.llm import LLMPolicy
from agentspec.types import Observation, ToolCall, ToolSpec

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


WEATHER = ToolSpec(name="get_weather", description="Weather of a city.",
                   parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
PARIS, LYON, ROME = (ToolCall(name="get_weather", arguments={"city": c}) for c in ("Paris", "Lyon", "Rome"))


def observed(call: ToolCall, content: str = "sunny") -> tuple[ToolCall, Observation]:
    return call, Observation(call_id=call.id, name=call.name, content=content)


def policy(url: str, tape: Any = None) -> LLMPolicy:
    client = ModelClient(ModelConfig(base_url=url, model="scripted-model", max_retries=0), tape=tape)
    return LLMPolicy(client, "You check the weather.", [WEATHER])


# --- an endpoint without either path ------------------------------------------------------------------------------


async def test_an_endpoint_without_either_path_cannot_verify_and_smc_says_so():
    with ScriptedOpenAIServer(lambda request: {"content": "OK"}) as srv:
        model = policy(srv.base_url)
        reason = await model.verification()
        assert reason == f"endpoint {srv.base_url} has neither /agentspec/verify_chain nor prompt_logprobs"
        assert await commit_mode(model, "verified") == f"trusted (verification unavailable: {reason})"
        again = policy(srv.base_url)
        again.client = model.client
        assert await again.verification() == reason
        assert len(srv.requests) == 1  # probed once per client: the 1-token prompt_logprobs request
        assert srv.requests[0]["max_tokens"] == 1 and srv.requests[0]["prompt_logprobs"] == 1
        await model.client.aclose()


# --- prompt log-probabilities over a toy template -----------------------------------------------------------------


def render(messages: list[dict[str, Any]]) -> str:
    """A Qwen-like chat template: calls written as the tool grammar writes them."""
    out = ""
    for message in messages:
        out += f"<|im_start|>{message['role']}\n{message.get('content') or ''}"
        for call in message.get("tool_calls") or []:
            body = {"name": call["function"]["name"], "arguments": json.loads(call["function"]["arguments"])}
            out += f"<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>"
        out += "<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


class LogprobServer:
    """Answers prompt_logprobs like vLLM: the prompt's tokens, each rank 1 unless it is in ``disagree`` (a
    token text the scripted model would not write there), then the argmax ``" Rome"``."""

    def __init__(self, disagree: str | None = None) -> None:
        self.disagree = disagree

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("prompt_logprobs") is None:
            return {"content": "OK"}
        tokens = re.findall(r"<\|im_\w+\|>|<tool_call>|</tool_call>|\w+|\s+|[^\w\s]", render(request["messages"]))
        entries: list[Any] = [None]
        for index, token in enumerate(tokens[1:], 1):
            if self.disagree is not None and token == self.disagree:
                entries.append({str(index): {"logprob": -3.0, "rank": 2, "decoded_token": token},
                                "99": {"logprob": -0.1, "rank": 1, "decoded_token": "Rome"}})
            else:
                entries.append({str(index): {"logprob": -0.01, "rank": 1, "decoded_token": token}})
        return {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "<"}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": len(tokens), "completion_tokens": 1, "total_tokens": len(tokens) + 1},
                "prompt_logprobs": entries}


async def test_prompt_logprobs_accept_every_step_the_model_would_write():
    with ScriptedOpenAIServer(LogprobServer()) as srv:
        model = policy(srv.base_url)
        assert await model.verification() is None
        verdict = await model.verify_chain([observed(PARIS)], [observed(LYON), observed(ROME, "rain")])
        assert (verdict.accepted, verdict.steps, verdict.forwards) == (2, 2, 1)
        assert verdict.next_text == "<" and verdict.prompt_tokens > 0
        sent = srv.requests[-1]
        # the conversation decide would send, then each step as history_messages appends it
        assert [m["role"] for m in sent["messages"]] == ["system", "assistant", "tool", "assistant", "tool", "assistant", "tool"]
        assert sent["messages"][3]["tool_calls"][0]["id"] == "step_1" and sent["max_tokens"] == 1
        await model.client.aclose()


async def test_prompt_logprobs_reject_at_the_first_call_token_the_model_would_not_write():
    with ScriptedOpenAIServer(LogprobServer(disagree="Lyon")) as srv:
        model = policy(srv.base_url)
        verdict = await model.verify_chain([observed(PARIS)], [observed(ROME), observed(LYON)])
        assert (verdict.accepted, verdict.steps) == (1, 2)
        assert verdict.next_text == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome'
        await model.client.aclose()


def test_a_call_missing_from_the_prompt_is_refused():
    tokens = [PromptToken("", 1, ""), PromptToken("<tool_call>a</tool_call>", 1, ""), PromptToken("<|im_end|>", 1, "")]
    assert accepted_by_ranks(tokens, ["<tool_call>a</tool_call>"]) == (1, None)
    assert accepted_by_ranks(tokens, ["<tool_call>a</tool_call>", "<tool_call>b</tool_call>"]) == (1, None)
    stop_refused = [*tokens[:2], PromptToken("<tool_call>", 3, "<|im_end|>")]
    assert accepted_by_ranks(stop_refused, ["<tool_call>a</tool_call>"]) == (0, "<tool_call>a</tool_call><|im_end|>")


async def test_verification_answers_are_recorded_and_replayed(tmp_path):
    chain = [observed(LYON), observed(ROME)]
    with ScriptedOpenAIServer(LogprobServer(disagree="Rome")) as srv:
        recording = Cassette(tmp_path / "rec", "record").for_model("scripted-model")
        model = policy(srv.base_url, recording)
        recorded = await model.verify_chain([observed(PARIS)], chain)
        await model.client.aclose()
    assert (recorded.accepted, recorded.steps) == (1, 2)
    replaying = policy("http://127.0.0.1:9/v1", Cassette(tmp_path / "rec", "replay").for_model("scripted-model"))
    assert await replaying.verification() is None  # no endpoint: the probe's answer is on the tape
    assert await replaying.verify_chain([observed(PARIS)], chain) == recorded
    await replaying.client.aclose()
    # A recording made before verification existed replays as "cannot verify", and says why.
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "responses.jsonl").write_text("")
    old = policy("http://127.0.0.1:9/v1", Cassette(tmp_path / "old", "replay").for_model("scripted-model"))
    assert "holds no chain verification answers" in (await old.verification() or "")
    await old.client.aclose()


async def test_queued_calls_of_a_multi_call_answer_are_the_next_decisions():
    model = policy("http://127.0.0.1:9/v1")
    model._queued = [LYON, PARIS]
    verdict = await model.verify_chain([observed(PARIS)], [observed(LYON), observed(ROME)])
    assert verdict == ChainVerdict(accepted=1, steps=2) and model._queued == [PARIS]
    await model.client.aclose()


async def test_support_is_cached_per_client():
    with ScriptedOpenAIServer(LogprobServer()) as srv:
        client = ModelClient(ModelConfig(base_url=srv.base_url, model="scripted-model", max_retries=0))
        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(support, client)
        assert (await support(client)).paths == ["prompt_logprobs"] and len(srv.requests) == 1
        await client.aclose()


# --- the real agentspec serve -------------------------------------------------------------------------------------

QWEN = "qwen2.5-coder-0.5b"
TASK = ("You are a weather assistant. The user asks: What is the weather in Paris and then in Rome, in celsius? "
        "Call get_weather once per city, one call per turn, then call done.")
RESULTS = ["Paris: 18 C, cloudy", "Rome: 24 C, clear", "ok"]


@pytest.mark.slow
async def test_agentspec_serve_verifies_as_deciding_step_by_step():
    from local_models import WEATHER_TOOLS, served

    tools = [ToolSpec(name=t["function"]["name"], description=t["function"]["description"],
                      parameters=t["function"]["parameters"]) for t in WEATHER_TOOLS]
    tools.append(ToolSpec(name="done", description="Finish.", parameters={"type": "object", "properties": {}}))
    with served(QWEN) as srv:
        client = ModelClient(ModelConfig(base_url=srv.base_url, model=QWEN, timeout_s=600, max_retries=0))
        authority = LLMPolicy(client, TASK, tools)  # tool_choice required: the server's own verify_chain path
        assert await authority.verification() is None
        assert (await support(client)).paths == ["verify_chain", "prompt_logprobs"]
        history: list[tuple[ToolCall, Observation]] = []
        for result in RESULTS:
            decision = await authority.decide(history)
            if decision.call is None:
                break
            history.append(observed(decision.call, result))
        assert len(history) >= 2
        verdict = await authority.verify_chain([], history)
        assert (verdict.accepted, verdict.steps, verdict.forwards) == (len(history), len(history), 1)
        berlin = ToolCall(name="get_weather", arguments={"city": "Berlin", "unit": "celsius"})
        wrong = [history[0], (berlin, history[1][1]), *history[2:]]
        refused = await authority.verify_chain([], wrong)
        assert (refused.accepted, refused.steps) == (1, len(history))
        assert refused.next_text is not None and refused.next_text.startswith('<tool_call>\n{"name": "get_weather"')
        # Prompt log-probabilities read the unconstrained argmax: conservative.  This coder model writes a fenced
        # json block where unconstrained, so it refuses the first call, and names the model's own first token.
        free = LLMPolicy(client, TASK, tools, tool_choice="auto")
        conservative = await free.verify_chain([], history)
        assert conservative.accepted == 0 and conservative.steps == len(history)
        first = await client.completion(free._messages([]), tools=tools, tool_choice="auto", max_tokens=1,
                                        temperature=0.0)
        assert conservative.next_text == first["choices"][0]["message"]["content"]
        await client.aclose()
