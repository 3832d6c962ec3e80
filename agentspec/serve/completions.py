"""One ``/v1/chat/completions`` request: prepare it, run it, answer as JSON or server-sent events.

:func:`prepare` validates the request and turns it into prompt tokens,
sampling parameters and, when a call is required, a grammar constraint (every
user mistake is a 400/404 :class:`APIError` before any model work).
:class:`CompletionResponse` is an ASGI response that runs the generation
while watching the connection: a client that disconnects cancels its
generation at the next token.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import anyio

from agentspec.decoding.serving import RequestContext
from agentspec.engine.generation import SamplingParams, TokenOut
from agentspec.engine.grammar import GrammarConstraint, ToolDef, schema_error, tool_grammar
from agentspec.engine.scheduler import Engine
from agentspec.errors import ConfigError
from agentspec.models.parsing import extract_tool_calls
from agentspec.serve.hints import HintTarget, HintTargets
from agentspec.serve.prompt import render_prompt
from agentspec.serve.prompt_logprobs import PromptLogprobJob
from agentspec.serve.protocol import MAX_HINT_BYTES, APIError, ChatRequest, parse_request
from agentspec.serve.schema_check import TooDeep, check_depth, unsatisfiable
from agentspec.serve.text import TextAssembler, ToolCallHoldback

__all__ = ["CompletionResponse", "PROBE_CHARS_PER_TOKEN", "Prepared", "check_prompt_size", "check_tools", "prepare"]

Send = Any
Receive = Any


@dataclass
class Prepared:
    """A validated request, ready to run on ``engine``."""

    request: ChatRequest
    engine: Engine
    prompt: list[int]
    params: SamplingParams
    constraint: GrammarConstraint | None
    context: RequestContext | None = None
    """The engine decoder's view of the request (ToolSpec: tools, hints, per-request stats), if it has one."""


def prepare(body: bytes, engines: dict[str, Engine], default_max_tokens: int) -> Prepared:
    """Validate ``body`` and build the generation inputs (blocking: run it in a worker thread)."""
    request = parse_request(body)
    engine = engines.get(request.model)
    if engine is None:
        raise APIError(
            404, f"the model {request.model!r} does not exist; served: {', '.join(engines)}",
            code="model_not_found", param="model",
        )
    lm = engine.lm
    if request.tools_active and request.tools:
        check_tools(request.tools, lm.ll_tokenizer)
    text = render_prompt(lm, request)
    check_prompt_size(text, engine)
    prompt = lm.encode(text)
    limit = request.token_limit
    room = lm.context_length - len(prompt)
    if room <= 0 or (limit is not None and limit > room):
        raise _too_long(lm.context_length, f"{len(prompt)} and {limit or 1} more were requested")
    params = SamplingParams(
        max_tokens=min(limit or default_max_tokens, room), temperature=request.temperature, top_p=request.top_p,
        seed=request.seed, top_logprobs=request.top_logprobs or 0, ignore_eos=request.ignore_eos,
    )
    constraint = None
    if request.requires_call and request.tools:
        grammar = tool_grammar(
            request.tools, only=request.forced_function, parallel=bool(request.parallel_tool_calls),
            ll_tokenizer=lm.ll_tokenizer,
        )
        try:
            constraint = GrammarConstraint(grammar, lm.ll_tokenizer, lm.vocab_size)
        except ConfigError as exc:
            raise APIError(400, str(exc), code="invalid_schema") from None
    return Prepared(request, engine, prompt, params, constraint, _context(request, engine))


def check_tools(tools: list[ToolDef], ll_tokenizer: Any) -> None:
    """Raise a 400 :class:`APIError` (code ``invalid_schema``) for a tool whose parameters are not a usable schema."""
    for index, tool in enumerate(tools):
        try:
            check_depth(tool.function.parameters)  # first: compiling and checking recurse once per level
            problem = schema_error(tool, ll_tokenizer)
            if problem is None and (reason := unsatisfiable(tool.function.parameters)) is not None:
                problem = f"cannot be satisfied: {reason}"
        except (TooDeep, RecursionError) as exc:  # RecursionError: a stack deeper than the cap allows for
            problem = f"is too deeply nested: {exc}"
        if problem is not None:
            param = f"tools[{index}].function.parameters"
            raise APIError(400, f"{param} {problem}", code="invalid_schema", param=param)


def _context(request: ChatRequest, engine: Engine) -> RequestContext | None:
    """The engine decoder's context of ``request``: the active tools' functions, the messages, the client's hints."""
    tools = [tool.function.model_dump(exclude_none=True) for tool in request.tools or []] \
        if request.tools_active else []
    messages = [{"role": m.role, "content": m.text()} for m in request.messages]
    # The decoder indexes each hint as it takes it: here, in prepare's worker thread, not in an engine step.
    hints = [(text, source) for _, text, source in request.hints()]
    return engine.decoder.context(tools, messages, hints)


PROBE_CHARS_PER_TOKEN = 8
"""A prompt longer than this many characters per context token is first counted on a prefix of that length."""


def check_prompt_size(text: str, engine: Engine) -> None:
    """Reject (400 ``context_length_exceeded``) a prompt that cannot fit the context, tokenising at most a prefix.

    Tokenising megabytes takes seconds and memory the process keeps, so a
    prompt is measured before it is tokenised: no token stands for more than
    ``engine.max_token_bytes`` bytes, which bounds the count from below
    without tokenising anything; a text still long for its context is counted
    on a prefix, cut where a whitespace run starts, so that the prefix's
    tokens are tokens of the whole text too.  A smollm2 context (8,192 tokens,
    at most 81 bytes each) rejects 700 kB unread and counts at most 64 k
    characters of anything over 64 k characters.
    """
    limit = engine.lm.context_length
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= limit:  # every token stands for at least one byte
        return
    if size > limit * engine.max_token_bytes:
        raise _too_long(limit, f"at least {size // engine.max_token_bytes} (the prompt is {size} bytes)")
    probe = limit * PROBE_CHARS_PER_TOKEN
    if len(text) > probe:
        counted = len(engine.lm.encode(_prefix_before_space(text, probe)))
        if counted > limit:
            raise _too_long(limit, f"more than {counted}")


def _prefix_before_space(text: str, length: int) -> str:
    """At most ``length`` characters of ``text``, ending where a whitespace run starts (if there is one)."""
    cut = length
    while cut > 0 and not text[cut].isspace():
        cut -= 1
    while cut > 0 and text[cut - 1].isspace():
        cut -= 1
    return text[:cut] if cut > 0 else text[:length]


def _too_long(limit: int, have: str) -> APIError:
    return APIError(
        400, f"this model's maximum context length is {limit} tokens; the messages have {have}",
        code="context_length_exceeded", param="messages",
    )


def _tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parsed text calls in OpenAI form; arguments that are not an object stay as their raw text."""
    out = []
    for call in calls:
        arguments = call["arguments"]
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        call_id = call.get("id") or f"call_{uuid.uuid4().hex[:24]}"
        out.append({"id": call_id, "type": "function", "function": {"name": call["name"], "arguments": text}})
    return out


class _Run:
    """Accumulates one generation's text, logprobs and counts."""

    def __init__(self, prepared: Prepared) -> None:
        self.prepared = prepared
        self.text = TextAssembler(prepared.request.stops)
        self.logprobs: list[dict[str, Any]] = []
        self.completion_tokens = 0
        self.cached_tokens = 0
        self.finish: str | None = None
        self.prompt_logprobs: list[Any] | None = None

    @property
    def wants_logprobs(self) -> bool:
        request = self.prepared.request
        return request.logprobs or bool(request.top_logprobs)

    def absorb(self, tokens: list[TokenOut]) -> tuple[str, list[dict[str, Any]]]:
        """Feed generated tokens; return the text they release and their logprob entries."""
        lm = self.prepared.engine.lm
        released, entries = [], []
        for token in tokens:
            if self.text.stopped:
                break
            self.completion_tokens += 1
            released.append(self.text.feed(lm.token_bytes(token.id)))
            if self.wants_logprobs:
                entries.append(self._logprob_entry(token))
        self.logprobs.extend(entries)
        return "".join(released), entries

    def _logprob_entry(self, token: TokenOut) -> dict[str, Any]:
        lm = self.prepared.engine.lm

        def one(token_id: int, logprob: float) -> dict[str, Any]:
            raw = lm.token_bytes(token_id)
            return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}

        return {**one(token.id, token.logprob), "top_logprobs": [one(i, lp) for i, lp in token.top]}

    def usage(self) -> dict[str, Any]:
        prompt = len(self.prepared.prompt)
        return {
            "prompt_tokens": prompt, "completion_tokens": self.completion_tokens,
            "total_tokens": prompt + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            **self._decoding(),
        }

    def _decoding(self) -> dict[str, Any]:
        """``agentspec_decoding``: the ToolSpec decoder's per-request statistics, when it served the request."""
        context = self.prepared.context
        report = context.usage() if context is not None else None
        return {"agentspec_decoding": report} if report is not None else {}

    def set_cached(self, cached: int) -> None:
        self.cached_tokens = cached

    async def steps(self) -> AsyncGenerator[tuple[str, list[dict[str, Any]]], None]:
        """Async iterator over ``(text, logprob entries)`` per step; sets :attr:`finish` at the end."""
        prepared = self.prepared
        top = prepared.request.prompt_logprobs
        if top is not None:
            engine = prepared.engine
            engine.stats.prompt_logprob_requests += 1
            job = PromptLogprobJob(engine.lm, prepared.prompt, top, prefill_chunk=engine.prefill_chunk)
            self.prompt_logprobs = await engine.run_job(job, prepared.request.priority)
        generation = prepared.engine.generate(
            prepared.prompt, prepared.params, prepared.constraint, self.set_cached, context=prepared.context,
            priority=prepared.request.priority,
        )
        async with aclosing(generation) as steps:
            async for tokens, finish in steps:
                yield self.absorb(tokens)
                if self.text.stopped:
                    self.finish = "stop"
                    return
                self.finish = finish


class CompletionResponse:
    """An ASGI response running ``prepared`` (JSON, or SSE with ``stream``); disconnects cancel it.

    ``targets`` holds the running requests that take hints (the app's one registry): a request with an
    ``agentspec_request_id`` claims it there for as long as it runs (a 409 when another running request owns it).
    """

    def __init__(self, prepared: Prepared, targets: HintTargets | None = None) -> None:
        self.prepared = prepared
        self.targets = targets if targets is not None else HintTargets()
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        request, context = self.prepared.request, self.prepared.context
        # A request on the plain path has no decoder context: nothing to register, nothing to take hints.
        target_id = request.agentspec_request_id if context is not None else None
        target = HintTarget(request.model, self.prepared.engine, context) if context is not None else None
        if target_id is not None and target is not None:
            try:
                self.targets.claim(target_id, target)
            except APIError as exc:
                await _send_json(send, exc.status, exc.body)
                return
        stats = self.prepared.engine.stats
        stats.requests += 1
        self.run = _Run(self.prepared)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(_cancel_on_disconnect, receive, group.cancel_scope)
                try:
                    if request.stream:
                        await self._stream(send)
                    else:
                        await self._complete(send)
                except anyio.get_cancelled_exc_class():
                    stats.cancelled += 1
                    raise
                stats.completed += 1
                group.cancel_scope.cancel()
        finally:
            if target_id is not None and target is not None:
                self.targets.release(target_id, target)
            with anyio.CancelScope(shield=True):  # a probe cut short still predicts the request it hints
                await self._forward_hint()

    async def _forward_hint(self) -> None:
        """Hand this request's text to the running request it hints (``agentspec_hint_for``), if any.

        A probe's text (its continued message plus what it generated, even
        when it was cut short) predicts the running request's output; the
        ToolSpec decoder of that request drafts from it (partial-token accept).
        The hint is indexed in a worker thread, and cut to the size a hint may have.
        """
        request = self.prepared.request
        target = self.targets.get(request.agentspec_hint_for) if request.agentspec_hint_for else None
        if target is None or not self.run.text.text:
            return
        prefix = request.messages[-1].text() if request.continue_final_message else ""
        text = _cut_to_bytes(prefix + self.run.text.text, MAX_HINT_BYTES)
        if await anyio.to_thread.run_sync(target.context.put_hint, text, "hint.spork"):
            target.engine.stats.hints_forwarded += 1

    # ------------------------------------------------------------ JSON

    async def _complete(self, send: Send) -> None:
        run = self.run
        try:
            async with aclosing(run.steps()) as steps:
                async for _ in steps:
                    pass
        except APIError as exc:
            await _send_json(send, exc.status, exc.body)
            return
        except (RuntimeError, ValueError) as exc:  # as the stream answers them: an error body, not a traceback
            await _send_json(send, 500, _server_error(exc))
            return
        run.text.finish()
        message, finish = self._message(run)
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
        if run.wants_logprobs:
            choice["logprobs"] = {"content": run.logprobs}
        body = {"id": self.id, "object": "chat.completion", "created": self.created,
                "model": self.prepared.request.model, "choices": [choice], "usage": run.usage()}
        if run.prompt_logprobs is not None:
            body["prompt_logprobs"] = run.prompt_logprobs
        await _send_json(send, 200, body)

    def _message(self, run: _Run) -> tuple[dict[str, Any], str | None]:
        text = run.text.text
        if self.prepared.request.tools_active:
            calls, rest = extract_tool_calls(text)
            if calls:
                return {"role": "assistant", "content": rest or None, "tool_calls": _tool_calls(calls)}, "tool_calls"
        return {"role": "assistant", "content": text}, run.finish

    # ------------------------------------------------------------ SSE

    async def _stream(self, send: Send) -> None:
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        run = self.run
        holdback = ToolCallHoldback() if self.prepared.request.tools_active else None
        await self._event(send, {"role": "assistant", "content": ""})
        try:
            async with aclosing(run.steps()) as steps:
                async for piece, entries in steps:
                    content = holdback.feed(piece) if holdback else piece
                    if content or entries:
                        await self._event(send, {"content": content} if content else {}, logprobs=entries)
            await self._stream_end(send, run, holdback)
        except APIError as exc:
            await _sse(send, exc.body)
        except (RuntimeError, ValueError) as exc:
            await _sse(send, _server_error(exc))
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})

    async def _stream_end(self, send: Send, run: _Run, holdback: ToolCallHoldback | None) -> None:
        tail = run.text.finish()
        finish = run.finish
        if holdback is None:
            if tail:
                await self._event(send, {"content": tail})
        else:
            content = holdback.feed(tail)
            calls, rest = extract_tool_calls(holdback.held) if holdback.held.strip() else ([], holdback.held)
            content += rest if calls else holdback.held
            if content:
                await self._event(send, {"content": content})
            if calls:
                finish = "tool_calls"
                deltas = [{"index": i, **call} for i, call in enumerate(_tool_calls(calls))]
                await self._event(send, {"tool_calls": deltas})
        await self._event(send, {}, finish=finish)
        options = self.prepared.request.stream_options or {}
        if options.get("include_usage"):
            await _sse(send, self._chunk([], usage=run.usage()))

    async def _event(
        self, send: Send, delta: dict[str, Any], *, logprobs: list[dict[str, Any]] | None = None,
        finish: str | None = None,
    ) -> None:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if logprobs:
            choice["logprobs"] = {"content": logprobs}
        await _sse(send, self._chunk([choice]))

    def _chunk(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
        chunk = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                 "model": self.prepared.request.model, "choices": choices}
        if usage is not None:
            chunk["usage"] = usage
        return chunk


def _server_error(exc: Exception) -> dict[str, Any]:
    return {"error": {"message": str(exc), "type": "server_error", "param": None, "code": None}}


def _cut_to_bytes(text: str, limit: int) -> str:
    """The longest prefix of ``text`` within ``limit`` UTF-8 bytes (a prefix of a prediction still predicts)."""
    data = text.encode("utf-8", "surrogatepass")
    return text if len(data) <= limit else data[:limit].decode("utf-8", "ignore")


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def _sse(send: Send, data: dict[str, Any]) -> None:
    body = b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})
