"""One async client for any OpenAI-compatible chat endpoint.

This is the seam between agentspec and model servers (vLLM, llama.cpp,
SGLang, OpenAI, ...).  It speaks through the ``openai`` SDK with the SDK's
own retries off, retries by itself (exponential backoff with jitter on
connection errors, timeouts, 429 and 5xx), and translates every SDK or HTTP
exception into the :mod:`agentspec.errors` tree.  It names only the SDK's own
exception types and ``httpx``'s: the HTTP library under the SDK changed
between versions (``httpx``, then ``httpx2``), and the SDK maps the newer
one's transport errors to its own types itself::

    async with ModelClient(ModelConfig(base_url="http://gpu:8000/v1", model="qwen3-8b")) as client:
        result = await client.chat([Message(role="user", content="Hi")], tools=specs)
        for call in result.message.tool_calls: ...
        for bad in result.invalid_tool_calls: ...   # answer with an error observation

Cancelling the awaiting task (a cancel scope, ``move_on_after``) aborts the
HTTP request and closes its connection, so the server sees the client leave.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

import anyio

from agentspec.errors import (
    ConfigError,
    ModelError,
    ModelOutputError,
    ModelRequestError,
    ModelTimeout,
    ModelUnavailable,
)
from agentspec.models.cassette import ModelTape
from agentspec.models.config import ModelConfig
from agentspec.models.parsing import StreamAssembler, parse_completion, to_openai_messages
from agentspec.models.result import ChatResult, StreamEvent, TextDelta, ToolCallDelta
from agentspec.types import Message, ToolSpec

if TYPE_CHECKING:
    import openai

__all__ = ["ChatStream", "ModelClient"]

T = TypeVar("T")

HINT_TIMEOUT_S = 5.0
"""A hint that takes longer than this to deliver is too late to help."""


class ModelClient:
    """Async client of one OpenAI-compatible endpoint, configured by a :class:`ModelConfig`.

    Use it as an async context manager, or call :meth:`aclose` when done.
    Every failure is raised as a :class:`~agentspec.errors.ModelError`:
    :class:`ModelTimeout` after ``timeout_s`` (per attempt),
    :class:`ModelUnavailable` when the endpoint cannot be reached or keeps
    answering 429/5xx, :class:`ModelRequestError` (with ``status_code``) for
    other 4xx answers, :class:`ModelOutputError` for unusable answers.
    """

    def __init__(self, config: ModelConfig, *, tape: ModelTape | None = None) -> None:
        """``tape``: record every completion to it, or (a replaying tape) answer from it without any request."""
        self.config = config
        self.tape = tape
        # The SDK (and httpx under it) take about half a second to import: paid by a process that opens a client,
        # not by every one that only names ModelClient (the bench protocol, the policies, ``import agentspec``).
        import openai

        self._sdk = openai.AsyncOpenAI(
            base_url=config.base_url, api_key=config.api_key, max_retries=0, timeout=config.timeout_s
        )
        self._model = config.model
        self._model_lock = anyio.Lock()
        self._hints_refused = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections; the client cannot be used afterwards."""
        with anyio.CancelScope(shield=True):
            await self._sdk.close()

    # ------------------------------------------------------------ public API

    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: str | list[str] | None = None,
        seed: int | None = None,
        logprobs: bool = False,
        top_logprobs: int | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> ChatResult:
        """Ask for one assistant turn.

        Arguments left ``None`` take the config's defaults; ``extra_body`` is
        merged over ``config.extra_body`` (server-specific fields such as
        ``top_k``).  Tool calls with unusable arguments are returned in
        ``invalid_tool_calls``, never dropped.
        """
        body = await self._body(
            messages, tools, tool_choice, max_tokens, temperature, stop, seed, logprobs, top_logprobs, extra_body
        )
        started = time.perf_counter()
        data = self.tape.answer(body) if self.tape is not None else None
        if data is None:
            data = await self._retrying(lambda: self._complete(body))
            if self.tape is not None:
                self.tape.store(body, data)
        return parse_completion(
            data, text_tool_calls=self._text_tools(tools), latency_s=time.perf_counter() - started
        )

    def stream_chat(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: str | list[str] | None = None,
        seed: int | None = None,
        logprobs: bool = False,
        top_logprobs: int | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> ChatStream:
        """Like :meth:`chat`, but yield :class:`TextDelta`/:class:`ToolCallDelta` as they arrive.

        The last event is the assembled :class:`ChatResult` (the same as
        :meth:`chat` would return).  Use ``async for event in
        client.stream_chat(...)``, or ``async with client.stream_chat(...) as
        stream`` to be sure the HTTP stream is closed if you stop early;
        cancelling the consumer closes it too.  Opening the stream is retried
        like :meth:`chat`; a failure after the first event is not.
        """
        args = (messages, tools, tool_choice, max_tokens, temperature, stop, seed, logprobs, top_logprobs, extra_body)
        return ChatStream(self, args)

    async def send_hints(self, request_id: str, calls: list[dict[str, Any]]) -> bool:
        """Hand predicted calls (``{"name", "arguments"[, "source"]}``) to the running request named
        ``request_id`` (its ``agentspec_request_id``), as draft hints: whether the endpoint took them.

        Only ``agentspec serve --decoder toolspec`` takes them (``POST /v1/agentspec/hints``).  A hint is help,
        never a need: an endpoint without the route, an ended request or any failure gives False, once tried and
        never retried; a replaying client sends nothing (no answer depends on a hint)."""
        if self._hints_refused or (self.tape is not None and self.tape.replaying):
            return False
        body = {"request_id": request_id, "predicted_calls": calls}
        import httpx  # already loaded with the SDK (see __init__)
        import openai

        try:
            with anyio.fail_after(min(self.config.timeout_s, HINT_TIMEOUT_S)):
                answer = await self._sdk.post("/agentspec/hints", body=body, cast_to=httpx.Response)
        except openai.NotFoundError:
            self._hints_refused = True  # not an agentspec server: stop asking
            return False
        except (TimeoutError, openai.OpenAIError, httpx.HTTPError):
            return False
        try:
            return bool(answer.json().get("delivered"))
        except ValueError:
            return False

    async def completion(self, messages: list[Message], **options: Any) -> dict[str, Any]:
        """The endpoint's whole ``chat.completion`` body for one request (``options`` as :meth:`chat` takes them),
        with the fields beyond OpenAI's it sends (vLLM's ``prompt_logprobs``).  Not recorded: a caller records
        what it reads of it (:mod:`agentspec.models.chain_verification`)."""
        body = await self._body(messages, options.get("tools"), options.get("tool_choice"), options.get("max_tokens"),
                                options.get("temperature"), options.get("stop"), options.get("seed"), False, None,
                                options.get("extra_body"))
        return await self._retrying(lambda: self._complete(body))

    async def agentspec_get(self, route: str) -> dict[str, Any] | None:
        """``GET`` an ``agentspec serve`` route (``/agentspec/capabilities``) under the base URL: its JSON, or None
        when the endpoint has no such route (404: another server)."""
        try:
            return await self._retrying(lambda: self._agentspec("get", route))
        except ModelRequestError as exc:
            if exc.status_code == 404:
                return None
            raise

    async def agentspec_post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        """``POST`` ``body`` to an ``agentspec serve`` route (``/agentspec/verify_chain``): its JSON answer."""
        return await self._retrying(lambda: self._agentspec("post", route, body))

    async def list_models(self) -> list[str]:
        """The ids of the models the endpoint serves (``GET /models``)."""
        return await self._retrying(self._list_models_once)

    async def resolve_model(self) -> str:
        """The model to ask: ``config.model``, else the only model the endpoint serves.

        Raises :class:`ConfigError` listing the served ids when there is not
        exactly one.
        """
        async with self._model_lock:
            if not self._model and self.tape is not None and self.tape.replaying:
                self._model = self.tape.model  # nothing to ask: the recording is keyed by the run's model name
            if not self._model:
                self._model = _only_model(self.config.base_url, await self.list_models())
        return self._model

    # ------------------------------------------------------------ internals

    async def _body(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        tool_choice: str | dict[str, Any] | None,
        max_tokens: int | None,
        temperature: float | None,
        stop: str | list[str] | None,
        seed: int | None,
        logprobs: bool,
        top_logprobs: int | None,
        extra_body: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for one request."""
        cfg = self.config
        body: dict[str, Any] = {"model": await self.resolve_model(), "messages": to_openai_messages(messages)}
        optional = {
            "tools": [tool.openai_schema() for tool in tools] if tools else None,
            "tool_choice": tool_choice,
            "max_tokens": max_tokens if max_tokens is not None else cfg.max_tokens,
            "temperature": temperature if temperature is not None else cfg.temperature,
            "stop": stop,
            "seed": seed if seed is not None else cfg.seed,
            "logprobs": True if logprobs or top_logprobs is not None else None,
            "top_logprobs": top_logprobs,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        merged = {**cfg.extra_body, **(extra_body or {})}
        if merged:
            body["extra_body"] = merged
        return body

    def _text_tools(self, tools: list[ToolSpec] | None) -> bool:
        return bool(tools) and self.config.parse_text_tool_calls

    async def _complete(self, body: dict[str, Any]) -> dict[str, Any]:
        with _translated(), anyio.fail_after(self.config.timeout_s):
            completion = await self._sdk.chat.completions.create(**body)
        return _as_dict(completion)

    async def _agentspec(self, method: str, route: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        import httpx  # already loaded with the SDK (see __init__)

        with _translated(), anyio.fail_after(self.config.timeout_s):
            if method == "get":
                answer = await self._sdk.get(route, cast_to=httpx.Response)
            else:
                answer = await self._sdk.post(route, body=body, cast_to=httpx.Response)
            data = answer.json()
        if not isinstance(data, dict):
            raise ModelOutputError(f"{route} answered {str(data)[:200]!r}, not a JSON object")
        return data

    async def _list_models_once(self) -> list[str]:
        with _translated(), anyio.fail_after(self.config.timeout_s):
            page = await self._sdk.models.list()
        return [model.id for model in page.data]

    async def _open_stream(self, body: dict[str, Any]) -> Any:
        stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        with _translated(), anyio.fail_after(self.config.timeout_s):
            return await self._sdk.chat.completions.create(**stream_body)

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run ``attempt``, retrying timeouts and unavailability with backoff."""
        for retry in range(self.config.max_retries + 1):
            try:
                return await attempt()
            except (ModelTimeout, ModelUnavailable):
                if retry == self.config.max_retries:
                    raise
            await anyio.sleep(self._backoff(retry))
        raise AssertionError("unreachable")

    def _backoff(self, retry: int) -> float:
        """Seconds to wait before retry ``retry + 1``: exponential, capped, jittered in its upper half."""
        ceiling = min(self.config.backoff_max_s, self.config.backoff_s * 2**retry)
        return random.uniform(ceiling / 2, ceiling)


class ChatStream:
    """The events of one streamed turn; see :meth:`ModelClient.stream_chat`.

    An async iterator of :class:`TextDelta`, :class:`ToolCallDelta` and, last,
    :class:`ChatResult`; also an async context manager that closes the HTTP
    stream on exit.  Nothing is sent before the first ``__anext__`` or
    ``__aenter__``.
    """

    def __init__(self, client: ModelClient, args: tuple[Any, ...]) -> None:
        self._client = client
        self._args = args
        self._sdk_stream: Any = None
        self._chunks: AsyncIterator[Any] | None = None
        self._assembler = StreamAssembler()
        self._pending: list[TextDelta | ToolCallDelta] = []
        self._started = 0.0
        self._done = False
        self._body: dict[str, Any] | None = None
        self._replayed: dict[str, Any] | None = None

    async def __aenter__(self) -> Self:
        await self._ensure_open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._done and not self._pending:
            raise StopAsyncIteration
        try:
            return await self._next_event()
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close the HTTP stream (the server sees the client leave if it was still sending).

        Errors while closing are ignored: they must not hide why the stream stopped.
        """
        self._done = True
        if self._sdk_stream is not None:
            # Whatever HTTP library the SDK version runs on, a failed close has nothing left to report.
            with anyio.CancelScope(shield=True), suppress(Exception):
                await self._sdk_stream.close()

    async def _ensure_open(self) -> None:
        if self._replayed is not None or self._sdk_stream is not None or self._done:
            return
        body = self._body = self._body or await self._client._body(*self._args)
        tape = self._client.tape
        self._replayed = tape.answer(body) if tape is not None else None
        if self._replayed is not None:
            content = (self._replayed.get("choices") or [{}])[0].get("message", {}).get("content")
            self._pending = [TextDelta(text=content)] if content else []
            return
        self._started = time.perf_counter()
        self._sdk_stream = await self._client._retrying(lambda: self._client._open_stream(body))
        self._chunks = self._sdk_stream.__aiter__()

    async def _next_event(self) -> StreamEvent:
        await self._ensure_open()
        while not self._pending:
            if self._done:
                raise StopAsyncIteration
            chunk = await self._next_chunk()
            if chunk is None:
                return await self._finish()
            self._pending.extend(self._assembler.feed(chunk))
        return self._pending.pop(0)

    async def _next_chunk(self) -> dict[str, Any] | None:
        if self._replayed is not None:
            return None
        assert self._chunks is not None
        try:
            with _translated(), anyio.fail_after(self._client.config.timeout_s):
                return _as_dict(await self._chunks.__anext__())
        except StopAsyncIteration:
            return None

    async def _finish(self) -> ChatResult:
        await self.aclose()
        completion = self._replayed
        if completion is None:
            completion = self._assembler.completion()
            if self._client.tape is not None and self._body is not None:
                self._client.tape.store(self._body, completion)
        return parse_completion(
            completion,
            text_tool_calls=self._client._text_tools(self._args[1]),
            latency_s=time.perf_counter() - self._started,
        )


# ---------------------------------------------------------------- error translation


@contextmanager
def _translated() -> Iterator[None]:
    """Re-raise SDK, HTTP and deadline errors as :mod:`agentspec.errors`.

    openai releases on ``httpx`` (1.x) let its transport errors escape while a
    stream is read; later ones raise ``APITimeoutError``/``APIConnectionError``.
    """
    import httpx  # already loaded with the SDK (see ModelClient.__init__)
    import openai

    try:
        yield
    except ModelError:
        raise
    except (TimeoutError, openai.APITimeoutError, httpx.TimeoutException) as exc:
        raise ModelTimeout(f"the model endpoint did not answer in time ({type(exc).__name__})") from exc
    except openai.APIStatusError as exc:
        raise _status_error(exc) from exc
    except (openai.APIConnectionError, httpx.TransportError) as exc:
        raise ModelUnavailable(f"cannot reach the model endpoint: {_cause(exc)}") from exc
    except openai.APIResponseValidationError as exc:
        raise ModelOutputError(f"the model endpoint answered with an unexpected body: {exc}") from exc
    except (openai.OpenAIError, httpx.HTTPError) as exc:
        raise ModelUnavailable(f"the model endpoint failed: {exc}") from exc
    except (ValueError, TypeError) as exc:  # undecodable JSON, a body of the wrong shape
        raise ModelOutputError(f"the model endpoint answered with an unreadable body: {exc}") from exc


def _status_error(exc: openai.APIStatusError) -> ModelError:
    status = exc.status_code
    detail = f"HTTP {status} from {exc.request.url}: {exc.message}"
    # 409 request_id_in_use: this request's earlier attempt (timed out here) still holds its id on the server
    # until the server notices the disconnect, so it is worth another try, like a busy server (429).
    if status == 429 or status >= 500 or status == 409 and getattr(exc, "code", None) == "request_id_in_use":
        return ModelUnavailable(detail)
    if status == 404:
        detail += " (does the base URL end in /v1, and is the model name right?)"
    return ModelRequestError(detail, status_code=status)


def _cause(exc: BaseException) -> str:
    """The most specific message of an exception chain (the SDK's own says only 'Connection error.')."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _as_dict(obj: Any) -> dict[str, Any]:
    """An SDK response object as the JSON dict the endpoint sent."""
    if isinstance(obj, dict):
        return obj
    try:
        return obj.to_dict(mode="json", warnings=False)
    except (AttributeError, TypeError, ValueError) as exc:
        raise ModelOutputError(f"the model endpoint answered with an unreadable body: {obj!r}") from exc


def _only_model(base_url: str, models: list[str]) -> str:
    if len(models) == 1:
        return models[0]
    listed = ", ".join(models) or "none"
    raise ConfigError(
        f"{base_url} serves {len(models)} models ({listed}); choose one with URL#MODEL or a model name"
    )
