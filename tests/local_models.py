"""Helpers for tests of the real local-model server: pull once, load once per process, serve on 127.0.0.1.

``one_thread`` is a module fixture: ``from local_models import one_thread  # noqa: F401`` applies it to a module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from agentspec.engine.scheduler import Engine
from agentspec.models.registry import pull
from agentspec.serve import ServerThread, create_app, load_engines

WEATHER_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time in a time zone.",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string"}, "hours_24": {"type": "boolean"}},
                "required": ["zone"],
                "additionalProperties": False,
            },
        },
    },
]


@contextmanager
def served(name: str) -> Iterator[ServerThread]:
    """Serve registry model ``name`` (pulled if needed; loaded once per process) on 127.0.0.1."""
    pull(name)
    with ServerThread(load_engines([name])) as server:
        yield server


def engines_by_decoder(name: str) -> dict[str, dict[str, Engine]]:
    """Registry model ``name`` (pulled if needed; loaded once per process) in new engines, ``"greedy"`` and
    ``"toolspec"`` (``agentspec serve --decoder toolspec``): fresh prefix caches and stats per call."""
    pull(name)
    return {"greedy": load_engines([name]), "toolspec": load_engines([name], decoder="toolspec")}


def apps_by_decoder(name: str) -> dict[str, Starlette]:
    """The server's app over each of :func:`engines_by_decoder`, for in-process requests (``httpx.ASGITransport``)."""
    return {decoder: create_app(engines) for decoder, engines in engines_by_decoder(name).items()}


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread in the module that imports this fixture: the models are small, so one intra-op thread is
    about as fast, and far faster on a busy machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def stats(server: ServerThread, model: str) -> dict[str, Any]:
    return httpx.get(server.base_url.removesuffix("/v1") + "/stats").json()[model]


def validate(value: Any, schema: dict[str, Any]) -> None:
    """Assert ``value`` follows ``schema`` (the subset the test tools use: types, enum, required, no extras)."""
    kind = schema.get("type")
    python = {"object": dict, "string": str, "boolean": bool, "integer": int, "number": (int, float)}
    if kind is not None:
        assert isinstance(value, python[kind]), f"{value!r} is not of type {kind}"
    if "enum" in schema:
        assert value in schema["enum"], f"{value!r} not in {schema['enum']}"
    if kind == "object":
        properties = schema.get("properties", {})
        missing = set(schema.get("required", [])) - set(value)
        assert not missing, f"missing {missing}"
        if schema.get("additionalProperties") is False:
            assert set(value) <= set(properties), f"unexpected keys {set(value) - set(properties)}"
        for key, item in value.items():
            if key in properties:
                validate(item, properties[key])


def tiny_model(folder: Path) -> Path:
    """A 2-layer random Llama with smollm2's tokenizer in ``folder`` (HF layout): fast wiring tests, no sense."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    source = pull("smollm2-135m")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=32768, bos_token_id=1, eos_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(folder))
    return folder
