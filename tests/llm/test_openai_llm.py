"""LLMOpenAI over real HTTP against a local fake OpenAI-compatible server."""

from __future__ import annotations

import email.utils
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from baf.errors import (
    ConfigurationError,
    LLMConnectionError,
    LLMRateLimitError,
    LLMResponseError,
    LLMStatusError,
    LLMTimeoutError,
)
from baf.llm import LLMOpenAI, LLMResponse, ToolCall, Usage
from baf.llm.openai_llm import _retry_after_seconds

from .fake_openai_server import FakeOpenAIServer, Reply, completion, error_reply, serve

SECRET = "sk-test-secret-0123456789"
USER = [{"role": "user", "content": "hi"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with serve() as running:
        yield running


@pytest.fixture
async def make_llm(server: FakeOpenAIServer) -> AsyncIterator[Callable[..., LLMOpenAI]]:
    """Build LLMOpenAI clients pointed at the fake server (fast retries), closing them afterwards."""
    made: list[LLMOpenAI] = []

    def make(**kwargs: Any) -> LLMOpenAI:
        options: dict[str, Any] = {
            "base_url": server.base_url,
            "api_key": SECRET,
            "timeout": 5.0,
            "max_retries": 3,
            "backoff": 0.01,
            "max_backoff": 1.0,
        }
        options.update(kwargs)
        llm = LLMOpenAI(options.pop("name", "fake-model"), **options)
        made.append(llm)
        return llm

    yield make
    for llm in made:
        await llm.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- successful answers -------------------------------------------------------------------------


async def test_plain_text(server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]) -> None:
    server.script(completion("Hello there", prompt_tokens=11, completion_tokens=2))
    llm = make_llm()

    response = await llm.predict_with_tools(USER, [])

    assert isinstance(response, LLMResponse)
    assert response.text == "Hello there"
    assert response.tool_calls == []
    assert response.usage == Usage(prompt_tokens=11, completion_tokens=2)
    assert response.raw["id"] == "chatcmpl-test"
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "fake-model"
    assert request.body["messages"] == USER
    assert "tools" not in request.body  # empty tool lists are not sent
    assert request.headers["authorization"] == f"Bearer {SECRET}"


async def test_predict_returns_text(server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]) -> None:
    server.script(completion("42"))
    assert await make_llm().predict("the answer?") == "42"


async def test_tool_calls_are_parsed_with_arguments_verbatim(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    arguments = '{"city":  "Paris" }'  # odd spacing must survive untouched
    server.script(
        completion(
            None,
            tool_calls=[
                {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": arguments}},
                {"id": "call_b", "type": "function", "function": {"name": "time", "arguments": "{}"}},
            ],
        )
    )
    llm = make_llm()

    response = await llm.predict_with_tools(USER, [WEATHER_TOOL])

    assert response.text is None
    assert response.tool_calls == [
        ToolCall(id="call_a", name="weather", arguments=arguments),
        ToolCall(id="call_b", name="time", arguments="{}"),
    ]
    assert server.requests[0].body["tools"] == [WEATHER_TOOL]


async def test_malformed_tool_arguments_are_kept_verbatim(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    broken = '{"city": "Par'
    server.script(
        completion(
            None,
            tool_calls=[{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": broken}}],
        )
    )

    response = await make_llm().predict_with_tools(USER, [WEATHER_TOOL])

    assert response.tool_calls == [ToolCall(id="c1", name="weather", arguments=broken)]


async def test_system_message_and_parameters_are_sent(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    server.script(completion("ok"))
    llm = make_llm(parameters={"temperature": 0.1, "max_tokens": 50, "top_k": 5})
    messages = [{"role": "user", "content": "hello"}]

    await llm.predict_with_tools(
        messages, [WEATHER_TOOL], parameters={"temperature": 0.7, "seed": 3}, system_message="Be brief."
    )

    body = server.requests[0].body
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
    ]
    assert messages == [{"role": "user", "content": "hello"}]  # the caller's list is not changed
    # Per-call values override the defaults; unknown server-specific fields (top_k) pass through.
    assert body["temperature"] == 0.7
    assert body["max_tokens"] == 50
    assert body["top_k"] == 5
    assert body["seed"] == 3
    assert llm.parameters == {"temperature": 0.1, "max_tokens": 50, "top_k": 5}


async def test_reserved_parameters_are_refused(make_llm: Callable[..., LLMOpenAI]) -> None:
    with pytest.raises(ConfigurationError, match="stream"):
        make_llm(parameters={"stream": True})
    llm = make_llm()
    with pytest.raises(ConfigurationError, match="model"):
        await llm.predict_with_tools(USER, [], parameters={"model": "other"})


# --- retries ------------------------------------------------------------------------------------


async def test_429_honours_retry_after(server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]) -> None:
    server.script(error_reply(429, "slow down", headers={"Retry-After": "0.3"}), completion("finally"))
    llm = make_llm(backoff=0.0)

    response = await llm.predict_with_tools(USER, [])

    assert response.text == "finally"
    assert len(server.requests) == 2
    waited = server.requests[1].received_at - server.requests[0].received_at
    assert 0.25 <= waited < 1.0


async def test_retry_after_is_capped_at_max_backoff(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    far_future = email.utils.formatdate(time.time() + 3600, usegmt=True)  # the HTTP-date form
    server.script(error_reply(503, "maintenance", headers={"Retry-After": far_future}), completion("back"))
    llm = make_llm(max_backoff=0.2)

    started = time.monotonic()
    response = await llm.predict_with_tools(USER, [])

    assert response.text == "back"
    assert time.monotonic() - started < 1.0
    waited = server.requests[1].received_at - server.requests[0].received_at
    assert waited >= 0.15


async def test_500_twice_then_success(server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]) -> None:
    server.script(error_reply(500, "boom"), error_reply(502, "bad gateway"), completion("recovered"))

    response = await make_llm().predict_with_tools(USER, [])

    assert response.text == "recovered"
    assert len(server.requests) == 3


async def test_500_forever_raises_status_error(server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]) -> None:
    server.script(*[error_reply(500, "the GPU caught fire") for _ in range(10)])
    llm = make_llm(max_retries=2)

    with pytest.raises(LLMStatusError) as caught:
        await llm.predict_with_tools(USER, [])

    assert caught.value.status_code == 500
    assert not isinstance(caught.value, LLMRateLimitError)
    assert len(server.requests) == 3
    message = str(caught.value)
    assert "500" in message and "the GPU caught fire" in message and "3 attempts" in message


async def test_429_forever_raises_rate_limit_error(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]
) -> None:
    server.script(*[error_reply(429, "quota exceeded", headers={"Retry-After": "0"}) for _ in range(3)])

    with pytest.raises(LLMRateLimitError) as caught:
        await make_llm(max_retries=1).predict_with_tools(USER, [])

    assert caught.value.status_code == 429
    assert "quota exceeded" in str(caught.value)
    assert len(server.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_client_errors_are_not_retried(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI], status: int
) -> None:
    server.script(error_reply(status, "messages[0].role is invalid"), completion("never sent"))

    with pytest.raises(LLMStatusError) as caught:
        await make_llm().predict_with_tools(USER, [])

    assert caught.value.status_code == status
    assert f"HTTP {status}" in str(caught.value)
    assert "messages[0].role is invalid" in str(caught.value)
    assert len(server.requests) == 1


async def test_timeout_raises_timeout_error(server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]) -> None:
    slow = Reply(body=completion("too late").body, delay=5.0)
    server.script(slow, slow)
    llm = make_llm(timeout=0.2, max_retries=1)

    started = time.monotonic()
    with pytest.raises(LLMTimeoutError) as caught:
        await llm.predict_with_tools(USER, [])

    assert time.monotonic() - started < 2.0
    assert len(server.requests) == 2
    assert "timed out after 2 attempts" in str(caught.value)


async def test_connection_refused_raises_connection_error(make_llm: Callable[..., LLMOpenAI]) -> None:
    llm = make_llm(base_url=f"http://127.0.0.1:{_closed_port()}/v1", max_retries=1)

    with pytest.raises(LLMConnectionError) as caught:
        await llm.predict_with_tools(USER, [])

    assert "could not reach" in str(caught.value)
    assert "2 attempts" in str(caught.value)


async def test_retry_after_ms_is_honoured(server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]) -> None:
    server.script(error_reply(429, "slow down", headers={"retry-after-ms": "200"}), completion("ok"))

    assert (await make_llm(backoff=0.0).predict_with_tools(USER, [])).text == "ok"

    waited = server.requests[1].received_at - server.requests[0].received_at
    assert 0.15 <= waited < 1.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "-5"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past: retry now
    ],
)
def test_retry_after_parsing(headers: dict[str, str], expected: float | None) -> None:
    assert _retry_after_seconds(headers) == expected


async def test_lenient_shapes_from_local_servers(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI], caplog: pytest.LogCaptureFixture
) -> None:
    server.script(
        completion(
            None,
            tool_calls=[
                # No id (older llama.cpp) and an object instead of a JSON string (some Ollama versions).
                {"type": "function", "function": {"name": "weather", "arguments": {"city": "Oslo"}}},
                {"id": "", "type": "function", "function": {"name": "time"}},
            ],
        ),
        Reply(body={"choices": [{"message": {"content": None, "refusal": "I can't help with that."}}]}),
    )
    llm = make_llm()

    with caplog.at_level(logging.WARNING):
        calls = (await llm.predict_with_tools(USER, [WEATHER_TOOL])).tool_calls
    refusal = await llm.predict_with_tools(USER, [])

    assert calls == [
        ToolCall(id="call_0", name="weather", arguments='{"city": "Oslo"}'),
        ToolCall(id="call_1", name="time", arguments=""),
    ]
    assert "without an id" in caplog.text  # filled in, but not silently
    assert refusal.text == "I can't help with that."
    assert refusal.usage == Usage()


async def test_repeated_tool_call_ids_are_made_unique_and_said(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI], caplog: pytest.LogCaptureFixture
) -> None:
    # Each tool result must name its own call: a repeated id would make the next request ambiguous
    # (OpenAI refuses it) and replay could not tell the results apart.
    def call(call_id: str | None, city: str) -> dict[str, Any]:
        data = {"type": "function", "function": {"name": "weather", "arguments": json.dumps({"city": city})}}
        return data if call_id is None else {"id": call_id, **data}

    server.script(completion(None, tool_calls=[call("a", "Oslo"), call("a", "Rome"), call(None, "Lima"),
                                               call("call_2", "Bern"), call("a_2", "Kyiv")]))  # fmt: skip
    llm = make_llm()
    with caplog.at_level(logging.WARNING):
        calls = (await llm.predict_with_tools(USER, [WEATHER_TOOL])).tool_calls
    assert [c.id for c in calls] == ["a", "a_2", "call_2", "call_2_2", "a_2_2"]
    assert [json.loads(c.arguments)["city"] for c in calls] == ["Oslo", "Rome", "Lima", "Bern", "Kyiv"]
    assert "with the id 'a' of an earlier call; using 'a_2'" in caplog.text


# --- answers that are not completions -----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("<html>this is not json", "not JSON"),
        ({"object": "chat.completion", "choices": []}, "no choices"),
        ({"error": {"message": "model is loading"}}, "model is loading"),
        ({"choices": [{"index": 0}]}, "no message"),
        ({"choices": [{"message": {"content": None, "tool_calls": [{"id": "x"}]}}]}, "no function name"),
        ([1, 2, 3], "not a JSON object"),
    ],
)
async def test_unusable_2xx_raises_response_error(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI], body: Any, reason: str
) -> None:
    server.script(Reply(body=body if isinstance(body, dict | str) else json.dumps(body)))

    with pytest.raises(LLMResponseError, match=reason):
        await make_llm().predict_with_tools(USER, [])

    assert len(server.requests) == 1  # a bad answer is not retried


# --- configuration and secrets ------------------------------------------------------------------


async def test_api_key_is_not_leaked(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI], caplog: pytest.LogCaptureFixture
) -> None:
    # Servers do echo keys back ("Incorrect API key provided: sk-...").
    server.script(
        error_reply(500, f"key {SECRET} is overloaded"),
        error_reply(401, f"Incorrect API key provided: {SECRET}"),
    )
    llm = make_llm()

    with caplog.at_level(logging.DEBUG), pytest.raises(LLMStatusError) as caught:
        await llm.predict_with_tools(USER, [])

    assert caught.value.status_code == 401
    assert SECRET not in str(caught.value)
    assert "Incorrect API key provided: ***" in str(caught.value)
    assert caught.value.__cause__ is None  # the openai error holds the Authorization header
    assert SECRET not in repr(llm)
    assert SECRET not in caplog.text
    assert "retrying" in caplog.text


def test_key_and_url_resolution_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.invalid/v1")
    props = {"llm.openai.api_key": "prop-key", "llm.openai.base_url": "http://prop.invalid/v1"}

    explicit = LLMOpenAI("m", api_key="arg-key", base_url="http://arg.invalid/v1", properties=props)
    from_props = LLMOpenAI("m", properties=props)
    from_env = LLMOpenAI("m")

    assert (explicit._api_key, explicit.base_url) == ("arg-key", "http://arg.invalid/v1")
    assert (from_props._api_key, from_props.base_url) == ("prop-key", "http://prop.invalid/v1")
    assert (from_env._api_key, from_env.base_url) == ("env-key", "http://env.invalid/v1")


def test_local_server_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    assert LLMOpenAI("llama3", base_url="http://localhost:11434/v1")._api_key == "not-needed"
    with pytest.raises(ConfigurationError, match="no API key"):
        LLMOpenAI("gpt-4o-mini")


async def test_placeholder_key_is_sent_to_a_local_server(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.script(completion("local"))

    async with LLMOpenAI("llama3", properties={"llm.openai.base_url": server.base_url}) as llm:
        assert (await llm.predict_with_tools(USER, [])).text == "local"

    assert server.requests[0].headers["authorization"] == "Bearer not-needed"


def test_repr_hides_credentials() -> None:
    llm = LLMOpenAI("m", api_key=SECRET, base_url="http://user:pw@example.invalid:8000/v1")
    text = repr(llm)
    assert SECRET not in text and "pw" not in text
    assert "example.invalid:8000" in text and "'m'" in text


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        LLMOpenAI("m", api_key="k", max_retries=-1)
    with pytest.raises(ConfigurationError):
        LLMOpenAI("m", api_key="k", timeout=0)
    with pytest.raises(ConfigurationError):
        LLMOpenAI("", api_key="k")


async def test_close_then_reuse(server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI]) -> None:
    server.script(completion("one"), completion("two"))
    llm = make_llm()
    assert (await llm.predict_with_tools(USER, [])).text == "one"
    await llm.close()
    await llm.close()  # idempotent
    assert (await llm.predict_with_tools(USER, [])).text == "two"


def test_a_password_in_the_base_url_is_redacted_like_the_key() -> None:
    from baf.log.redaction import registered_secrets

    llm = LLMOpenAI("m", base_url="http://proxy-user:pw-canary%405e1d09@127.0.0.1:9/v1")
    assert {"pw-canary@5e1d09", "pw-canary%405e1d09"} <= set(registered_secrets())  # as sent, and as written
    assert "5e1d09" not in repr(llm)


@pytest.mark.parametrize("key", ["k9x4", "k9x4z", "k9x4z7", "k9x4z7q"])
async def test_one_rule_for_what_the_client_masks_and_the_log_redacts(
    server: FakeOpenAIServer, make_llm: Callable[..., LLMOpenAI], key: str
) -> None:
    from baf.log.redaction import MIN_SECRET_LENGTH, registered_secrets

    server.script(error_reply(401, f"Incorrect API key provided: {key}"))
    llm = make_llm(api_key=key, max_retries=0)
    with pytest.raises(LLMStatusError) as caught:
        await llm.predict_with_tools(USER, [])
    masked = key not in str(caught.value)
    assert masked == (key in registered_secrets()) == (len(key) >= MIN_SECRET_LENGTH)
