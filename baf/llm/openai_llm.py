"""An LLM backed by any OpenAI-compatible chat-completions server.

``LLMOpenAI`` talks to OpenAI itself or to a local server that speaks the same protocol (vLLM, Ollama,
llama.cpp, LM Studio, ...) through the official ``openai`` package's async client.

Retries are done here, not by the ``openai`` client, so that the policy is one readable loop:

1. HTTP 429 and every 5xx, connection failures and timeouts are retried, at most ``max_retries`` times.
2. The wait before a retry is the server's ``Retry-After`` (seconds or an HTTP date; ``retry-after-ms``
   also counts) when it sends one, otherwise exponential backoff with jitter; either way it is capped at
   ``max_backoff`` seconds.
3. Any other 4xx is never retried: resending the same request cannot fix it.
4. When the retries run out, the typed error from :mod:`baf.errors` is raised: ``LLMRateLimitError``,
   ``LLMStatusError`` (with ``status_code``), ``LLMTimeoutError`` or ``LLMConnectionError``. A 2xx answer
   that is not a usable completion raises ``LLMResponseError`` straight away.

Local servers' looser answers are accepted where nothing is lost, each with a warning in the log: a tool
call without an id gets ``call_<index>``, one repeating an earlier call's id gets a suffix (``_2``, ...)
so that every tool result names its own call, and arguments sent as an object are serialised to text.

With ``stream=True`` the answer is asked for as a stream (``"stream": true``, with
``stream_options.include_usage`` so the token counts still arrive) and :meth:`LLMOpenAI.stream_with_tools`
hands each piece of text on as it comes (:mod:`baf.llm.openai_stream` reads and assembles the chunks).
The retry policy above covers a stream too: one that breaks off before it is complete (the connection
drops, or it ends without ``[DONE]`` or a ``finish_reason``) is a connection failure, retried from the
start as attempt 2, 3, ...; only a complete answer is returned, so nothing acts on half of one. For a
stream, ``timeout`` bounds the wait for the first piece and for each next one, not the whole answer.

The API key never appears in an exception message, a log line or ``repr``: server text is redacted
before it is quoted, and errors from the ``openai`` package are not chained (their request objects carry
the ``Authorization`` header).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import openai

from baf.errors import (
    ConfigurationError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMStatusError,
    LLMTimeoutError,
)
from baf.llm.base import LLM, LLMResponse, TextSink, ToolCall, Usage
from baf.llm.openai_stream import ChunkAssembler, EventReader, StreamFormatError
from baf.log.redaction import MIN_SECRET_LENGTH, register_secret
from baf.wording import counted

__all__ = ["LLMOpenAI"]

logger = logging.getLogger(__name__)

#: Property keys read when the key / URL is not passed explicitly.
API_KEY_PROPERTY = "llm.openai.api_key"
BASE_URL_PROPERTY = "llm.openai.base_url"

#: Sent when a local server is used without a key: the ``openai`` client refuses to start without one,
#: and servers such as vLLM or Ollama ignore it.
PLACEHOLDER_API_KEY = "not-needed"

#: Request fields this class owns; letting ``parameters`` override them would desynchronise the request
#: from what the caller passed (or, for ``stream``, make the answer unparseable).
_RESERVED_PARAMETERS = frozenset({"model", "messages", "tools", "stream"})

#: How much of a server's error text is quoted in an exception message.
_MAX_QUOTED_CHARS = 500

_REDACTED = "***"


class _StreamCutError(Exception):
    """A stream that broke off, or ended before it was complete; retried like a dropped connection (it
    never leaves the client)."""


@dataclass(frozen=True, slots=True)
class _Failure:
    """One failed attempt, classified: enough to decide on a retry and to build the final error."""

    kind: str  # "status", "timeout", "connection" or "other"
    detail: str
    status_code: int | None = None
    retry_after: float | None = None

    @property
    def retryable(self) -> bool:
        if self.kind in ("timeout", "connection"):
            return True
        if self.kind == "status" and self.status_code is not None:
            return self.status_code == 429 or self.status_code >= 500
        return False


class LLMOpenAI(LLM):
    """A model served over the OpenAI chat-completions protocol.

    :param name: the model name sent as ``model`` (e.g. ``"gpt-4o-mini"``, ``"qwen2.5:7b"``).
    :param parameters: default request fields (``temperature``, ``max_tokens``, ``seed``, ...); a per-call
        ``parameters`` dict overrides them key by key. They are sent verbatim in the JSON body, so
        server-specific fields (``top_k`` for vLLM, ...) work too.
    :param base_url: the server, e.g. ``"http://localhost:11434/v1"``. Falls back to the
        ``llm.openai.base_url`` property, then ``OPENAI_BASE_URL``, then OpenAI itself.
    :param api_key: falls back to the ``llm.openai.api_key`` property, then ``OPENAI_API_KEY``. When a
        ``base_url`` is known and no key is found, a placeholder is sent: local servers need none.
    :param timeout: seconds one attempt may take, start to finish.
    :param max_retries: retries after the first attempt (so at most ``max_retries + 1`` requests).
    :param backoff: the first backoff in seconds; it doubles on each retry (with jitter).
    :param max_backoff: the cap on any single wait, including one asked for by ``Retry-After``.
    :param properties: a mapping such as the agent's properties, read for the key and URL.
    :param stream: ask for answers as streams, so the reasoning kernel can show the text as it is written
        (:meth:`stream_with_tools`; see the module docstring). :meth:`predict_with_tools` still asks for
        whole answers.

    The underlying HTTP client is opened on first use; call :meth:`close` (or use ``async with``) to
    release its connections.
    """

    provider = "openai"  # the protocol; a compatible server elsewhere is still reached the OpenAI way

    def __init__(
        self,
        name: str,
        parameters: Mapping[str, Any] | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        properties: Mapping[str, Any] | None = None,
        stream: bool = False,
    ) -> None:
        if not name:
            raise ConfigurationError("LLMOpenAI needs a model name")
        if not timeout > 0:
            raise ConfigurationError(f"LLMOpenAI timeout must be positive, got {timeout!r}")
        if max_retries < 0:
            raise ConfigurationError(f"LLMOpenAI max_retries cannot be negative, got {max_retries!r}")
        if backoff < 0 or max_backoff < 0:
            raise ConfigurationError(
                f"LLMOpenAI backoff and max_backoff cannot be negative, got {backoff!r} and {max_backoff!r}"
            )
        self.name = name
        self.parameters: dict[str, Any] = dict(parameters or {})
        _check_parameters(self.parameters)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.streams = bool(stream)

        props: Mapping[str, Any] = properties or {}
        self.base_url: str | None = _first_set(
            base_url, props.get(BASE_URL_PROPERTY), os.environ.get("OPENAI_BASE_URL")
        )
        key = _first_set(api_key, props.get(API_KEY_PROPERTY), os.environ.get("OPENAI_API_KEY"))
        if key is None:
            if self.base_url is None:
                raise ConfigurationError(
                    f"LLMOpenAI({name!r}) has no API key: pass api_key=, set the {API_KEY_PROPERTY!r} "
                    f"property or the OPENAI_API_KEY environment variable, or give a base_url for a "
                    f"local server that needs no key"
                )
            key = PLACEHOLDER_API_KEY
        # Kept private and never formatted: it is only handed to the client and used for redaction.
        self._api_key = key
        register_secret(key)  # every session log redacts it, whichever agent or pattern uses this client
        password = urlsplit(self.base_url).password if self.base_url is not None else None
        if password is not None:  # a proxy's user:password@ is a key too, as written and as sent
            register_secret(password)
            register_secret(unquote(password))
        self._client: openai.AsyncOpenAI | None = None

    def __repr__(self) -> str:
        return (
            f"LLMOpenAI(name={self.name!r}, base_url={_safe_url(self.base_url)!r}, "
            f"api_key={_REDACTED!r}, timeout={self.timeout}, max_retries={self.max_retries}"
            + (", stream=True)" if self.streams else ")")
        )

    async def __aenter__(self) -> LLMOpenAI:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP client and its connections. A later call opens a new one."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _get_client(self) -> openai.AsyncOpenAI:
        # Opened lazily so that building an agent (often outside any event loop) opens no sockets.
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=0,  # the retry policy lives in predict_with_tools, in one place
            )
        return self._client

    async def predict_with_tools(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        parameters: dict[str, Any] | None = None,
        system_message: str | None = None,
    ) -> LLMResponse:
        """Run one chat completion, retrying transient failures; see the module docstring."""
        request = self._request(messages, tools, parameters, system_message)
        return await self._with_retries(lambda attempt: self._attempt(request))

    async def stream_with_tools(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_text: TextSink,
        parameters: dict[str, Any] | None = None,
        system_message: str | None = None,
    ) -> LLMResponse:
        """Run one chat completion as a stream, awaiting ``on_text(delta, attempt)`` for each piece of
        text, and return the complete answer. A stream cut mid-way is retried from its start under the
        next attempt number (see the module docstring); tool calls are returned only whole."""
        request = self._request(messages, tools, parameters, system_message)
        return await self._with_retries(lambda attempt: self._stream_attempt(request, on_text, attempt))

    def _request(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        parameters: dict[str, Any] | None,
        system_message: str | None,
    ) -> dict[str, Any]:
        call_parameters = {**self.parameters, **(parameters or {})}
        _check_parameters(call_parameters)
        request_messages = list(messages)
        if system_message is not None:
            request_messages.insert(0, {"role": "system", "content": system_message})
        request: dict[str, Any] = {
            "model": self.name,
            "messages": request_messages,
            # Sent through extra_body so every field reaches the server verbatim, including ones the
            # openai package does not know (server-specific sampling options).
            "extra_body": call_parameters,
        }
        if tools:
            request["tools"] = tools
        return request

    async def _with_retries(self, attempt_once: Callable[[int], Awaitable[LLMResponse]]) -> LLMResponse:
        """``attempt_once(attempt)`` for attempt 1, 2, ... until one succeeds or the retry policy gives up."""
        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return await attempt_once(attempt)
            except openai.APIStatusError as exc:
                failure = self._status_failure(exc)
            except (openai.APITimeoutError, TimeoutError):
                failure = _Failure("timeout", f"no answer within {self.timeout:g} s")
            except openai.APIConnectionError as exc:
                failure = _Failure("connection", self._redact(_root_cause(exc)))
            except _StreamCutError as exc:
                failure = _Failure("connection", self._redact(str(exc)))
            except openai.OpenAIError as exc:
                failure = _Failure("other", self._redact(f"{type(exc).__name__}: {exc}"))

            if not failure.retryable or attempt == attempts:
                # from None: the openai exception holds the request, Authorization header included.
                raise self._final_error(failure, attempt) from None
            delay = self._retry_delay(attempt, failure.retry_after)
            logger.warning(
                "LLM %r at %s: attempt %d of %d failed (%s); retrying in %.2f s",
                self.name,
                _safe_url(self.base_url) or "api.openai.com",
                attempt,
                attempts,
                _describe(failure),
                delay,
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt either returns or raises")

    async def _attempt(self, request: dict[str, Any]) -> LLMResponse:
        """Send one request and parse the 2xx answer; failures raise ``openai`` errors."""
        client = self._get_client()
        # The client's own timeout applies per socket operation; this bounds the whole attempt, so a
        # server that trickles bytes cannot hold a call past ``timeout``.
        async with asyncio.timeout(self.timeout):
            raw = await client.chat.completions.with_raw_response.create(**request)
            text: str = raw.http_response.text
        return self._parse(text)

    async def _stream_attempt(self, request: dict[str, Any], on_text: TextSink, attempt: int) -> LLMResponse:
        """Send one streamed request, hand its text to ``on_text`` as it arrives, and return the
        assembled answer; a stream that ends before it is complete raises :class:`_StreamCutError`."""
        client = self._get_client()
        create = client.chat.completions.with_streaming_response.create
        async with asyncio.timeout(self.timeout):  # until the answer starts: status and headers
            opened = create(**request, stream=True, stream_options={"include_usage": True})
            response = await opened.__aenter__()
        try:
            if "text/event-stream" not in response.headers.get("content-type", ""):
                # A server that ignored "stream" answered whole: as good an answer, in one piece.
                async with asyncio.timeout(self.timeout):
                    whole = self._parse(await response.text())
                if whole.text:
                    await on_text(whole.text, attempt)
                return whole
            return await self._read_stream(response, on_text, attempt)
        finally:
            await opened.__aexit__(None, None, None)

    async def _read_stream(self, response: Any, on_text: TextSink, attempt: int) -> LLMResponse:
        events, assembler = EventReader(), ChunkAssembler()
        lines = response.iter_lines()
        try:
            while not assembler.done:
                async with asyncio.timeout(self.timeout):  # the wait for each next piece
                    try:
                        line = await anext(lines, None)
                    except Exception as exc:  # the HTTP library's own error: openai does not wrap a body's
                        raise _StreamCutError(f"the answer broke off: {_root_cause(exc)}") from None
                data = events.end() if line is None else events.feed(line)
                if data is not None:
                    delta = assembler.add(data)
                    if delta:
                        await on_text(delta, attempt)
                if line is None:
                    break
        except StreamFormatError as exc:
            raise self._bad_response(self._redact(str(exc))) from None
        finally:
            await lines.aclose()
        if not assembler.complete:
            raise _StreamCutError(
                f"the stream ended after {assembler.chunks} chunk(s), before the answer was complete "
                "(no finish_reason, no [DONE])"
            )
        message = assembler.message()
        text = message.get("content")
        if text is None and isinstance(message.get("refusal"), str):
            text = message["refusal"]  # as for a whole answer: a refusal is the model's answer
        return LLMResponse(
            text=text,
            tool_calls=self._parse_tool_calls(message.get("tool_calls")),
            usage=_parse_usage(assembler.usage),
            raw={"streamed": True, "message": message, "usage": assembler.usage},
        )

    def _status_failure(self, exc: openai.APIStatusError) -> _Failure:
        response = exc.response
        return _Failure(
            "status",
            self._redact(_server_error_text(response)),
            status_code=response.status_code,
            retry_after=_retry_after_seconds(response.headers),
        )

    def _retry_delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if retry_after is not None:
            return min(retry_after, self.max_backoff)
        ceiling = min(self.max_backoff, self.backoff * 2.0 ** (attempt - 1))
        # Equal jitter: at least half the backoff, so retries still spread out, but never in lockstep
        # with other clients that failed at the same moment.
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def _final_error(self, failure: _Failure, attempts: int) -> LLMError:
        where = f"model {self.name!r} at {_safe_url(self.base_url) or 'api.openai.com'}"
        tries = f"after {counted(attempts, 'attempt')}"
        if failure.kind == "timeout":
            return LLMTimeoutError(f"{where} timed out {tries}: {failure.detail}")
        if failure.kind == "connection":
            return LLMConnectionError(f"could not reach {where} {tries}: {failure.detail}")
        if failure.kind == "status" and failure.status_code is not None:
            status = failure.status_code
            if status == 429:
                return LLMRateLimitError(f"{where} kept answering HTTP 429 (rate limited) {tries}: {failure.detail}")
            if failure.retryable:
                message = f"{where} answered HTTP {status} {tries}: {failure.detail}"
            else:
                message = f"{where} answered HTTP {status} (client errors are not retried): {failure.detail}"
            return LLMStatusError(message, status)
        return LLMError(f"{where} failed: {failure.detail}")

    def _parse(self, body_text: str) -> LLMResponse:
        """Turn a 2xx body into an LLMResponse, or raise LLMResponseError saying what is wrong."""
        try:
            body = json.loads(body_text)
        except ValueError:
            raise self._bad_response(f"the body is not JSON: {_quote(self._redact(body_text))}") from None
        if not isinstance(body, dict):
            raise self._bad_response(f"the body is not a JSON object: {_quote(self._redact(body_text))}")
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices:
            # Some servers answer 200 with an error object instead of an error status.
            error = body.get("error")
            reason = f"the server reported an error: {error}" if error else "it has no choices"
            raise self._bad_response(f"{self._redact(reason)}; body: {_quote(self._redact(body_text))}")
        choice = choices[0]
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise self._bad_response(f"choices[0] has no message object: {_quote(self._redact(body_text))}")

        text = message.get("content")
        if text is None and isinstance(message.get("refusal"), str):
            # A refusal is the model's answer; dropping it would leave the agent with nothing to show.
            text = message["refusal"]
        if text is not None and not isinstance(text, str):
            raise self._bad_response(f"message content is a {type(text).__name__}, not a string")

        return LLMResponse(
            text=text,
            tool_calls=self._parse_tool_calls(message.get("tool_calls")),
            usage=_parse_usage(body.get("usage")),
            raw=body,
        )

    def _parse_tool_calls(self, calls: Any) -> list[ToolCall]:
        if calls is None:
            return []
        if not isinstance(calls, list):
            raise self._bad_response(f"message tool_calls is a {type(calls).__name__}, not a list")
        parsed: list[ToolCall] = []
        used: set[str] = set()
        for index, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise self._bad_response(f"tool call {index} has no function name: {_quote(str(call))}")
            arguments = function.get("arguments")
            if arguments is None:
                arguments = ""
            elif isinstance(arguments, dict):
                # A few servers send an object instead of a JSON string; serialising it loses nothing.
                arguments = json.dumps(arguments)
            elif not isinstance(arguments, str):
                raise self._bad_response(
                    f"tool call {index} ({function['name']}) has arguments of type {type(arguments).__name__}"
                )
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                # Some local servers omit ids; the tool result must still name the call it answers.
                call_id = _unused(f"call_{index}", used)
                logger.warning("LLM %r returned tool call %d (%s) without an id; using %r",
                               self.name, index, function["name"], call_id)  # fmt: skip
            elif call_id in used:
                # Others repeat one: each result must name its own call (OpenAI refuses a conversation
                # where two do not, and replay matches results to calls by id).
                given, call_id = call_id, _unused(call_id, used)
                logger.warning("LLM %r returned tool call %d (%s) with the id %r of an earlier call; using %r",
                               self.name, index, function["name"], given, call_id)  # fmt: skip
            used.add(call_id)
            parsed.append(ToolCall(id=call_id, name=function["name"], arguments=arguments))
        return parsed

    def _bad_response(self, reason: str) -> LLMResponseError:
        return LLMResponseError(
            f"model {self.name!r} at {_safe_url(self.base_url) or 'api.openai.com'} answered, "
            f"but not with a usable completion: {reason}"
        )

    def _redact(self, text: str) -> str:
        # The placeholder is no secret, and short keys would garble unrelated text: one rule with the
        # redaction of records (register_secret), so what one masks the other does too.
        if self._api_key != PLACEHOLDER_API_KEY and len(self._api_key) >= MIN_SECRET_LENGTH:
            return text.replace(self._api_key, _REDACTED)
        return text


def _check_parameters(parameters: Mapping[str, Any]) -> None:
    reserved = sorted(_RESERVED_PARAMETERS.intersection(parameters))
    if reserved:
        raise ConfigurationError(
            f"LLM parameters cannot set {', '.join(reserved)}: these request fields are set by LLMOpenAI "
            f"from the model name and the call's arguments"
        )


def _first_set(*values: Any) -> str | None:
    """The first value that is set and not empty (an empty env var means unset)."""
    for value in values:
        if value is not None and str(value) != "":
            return str(value)
    return None


def _safe_url(url: str | None) -> str | None:
    """``url`` without any ``user:password@`` part, for messages and repr."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"{_REDACTED}@{host}", parts.path, parts.query, parts.fragment))


def _retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The wait a server asked for, in seconds, or None when it asked for none (or said nonsense)."""
    retry_after_ms = headers.get("retry-after-ms")
    if retry_after_ms is not None:
        try:
            value = float(retry_after_ms) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return max(value, 0.0)
    retry_after = headers.get("retry-after")
    if retry_after is None:
        return None
    try:
        value = float(retry_after)
    except ValueError:
        pass
    else:
        return max(value, 0.0) if math.isfinite(value) else None
    try:
        when = email.utils.parsedate_to_datetime(retry_after)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _server_error_text(response: Any) -> str:
    """The most readable error text in an error response: its message field, else the raw body."""
    try:
        text: str = response.text
    except Exception:  # the body may be unread or undecodable; the status alone still says a lot
        return "(no readable body)"
    try:
        body = json.loads(text)
    except ValueError:
        return _quote(text) if text.strip() else "(empty body)"
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            for key in ("message", "detail", "error"):
                if isinstance(error.get(key), str) and error[key]:
                    return _quote(error[key])
        elif isinstance(error, str) and error:
            return _quote(error)
    return _quote(text)


def _unused(candidate: str, used: set[str]) -> str:
    """``candidate``, or with a suffix (``_2``, ``_3`` ...) that no call of this response has taken."""
    unique, suffix = candidate, 1
    while unique in used:
        suffix += 1
        unique = f"{candidate}_{suffix}"
    return unique


def _quote(text: str) -> str:
    text = text.strip()
    if len(text) > _MAX_QUOTED_CHARS:
        return f"{text[:_MAX_QUOTED_CHARS]!r}... ({len(text)} chars)"
    return repr(text)


def _root_cause(exc: BaseException) -> str:
    """The innermost cause of a connection failure (e.g. ``ConnectError: [Errno 111] ...``)."""
    cause: BaseException = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    text = str(cause) or "no details"
    return f"{type(cause).__name__}: {text}"


def _describe(failure: _Failure) -> str:
    if failure.kind == "status":
        return f"HTTP {failure.status_code}: {failure.detail}"
    return f"{failure.kind}: {failure.detail}"


def _parse_usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return Usage(prompt_tokens=count("prompt_tokens"), completion_tokens=count("completion_tokens"))
