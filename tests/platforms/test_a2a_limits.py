"""The A2A platform's limits against hostile clients: requests per second and open at once per address,
bodies over the limit, WebSockets and other scopes, CORS on refusals, ``allowed_origins=["*"]``. Real HTTP
(httpx and raw sockets) and real websockets on loopback; every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from baf import Agent
from baf.core.session import Session
from baf.errors import ConfigurationError
from baf.platforms.a2a import A2APlatform
from baf.platforms.a2a.guard import CallerGuard
from baf.platforms.limits import ClientLimits

from .helpers import body_agent, echo
from .test_a2a import _helper_agent, _refusal, _rpc_send


def _client(address: str = "127.0.0.1") -> httpx.AsyncClient:
    """An HTTP client whose connections come from ``address`` (any 127.x.y.z is this machine on Linux)."""
    return httpx.AsyncClient(timeout=10, transport=httpx.AsyncHTTPTransport(local_address=address))


def _stream_request(context: str) -> dict[str, Any]:
    """A JSON-RPC ``message/stream`` (A2A 0.3): the response stays open while the task runs."""
    return {**_rpc_send("wait", context), "method": "message/stream"}


async def _until(condition: Any, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


@contextlib.asynccontextmanager
async def _held_streams(platform: A2APlatform, sources: list[str], release: asyncio.Event) -> AsyncIterator[None]:
    """Streaming requests, one from each source address (to the server's loopback address of its family),
    open until ``release`` is set."""

    async def hold(index: int, source: str) -> None:
        url = f"http://[::1]:{platform.port}/" if ":" in source else f"http://127.0.0.1:{platform.port}/"
        async with (
            _client(source) as http,
            http.stream("POST", url, json=_stream_request(f"held-{index}")) as response,
        ):
            assert response.status_code == 200
            async for _ in response.aiter_bytes():
                pass

    holders = [asyncio.ensure_future(hold(i, source)) for i, source in enumerate(sources)]
    try:
        await _until(lambda: all(platform.has_client(f"a2a-held-{i}") for i in range(len(sources))), "tasks running")
        yield
    finally:
        release.set()
        await asyncio.wait_for(asyncio.gather(*holders), 10)


def _waiting_agent(release: asyncio.Event) -> Agent:
    async def wait_then_echo(session: Session) -> None:
        await release.wait()
        echo(session)

    return body_agent(wait_then_echo)


# -- requests per second and open at once, per address ------------------------------------------------


async def test_requests_per_second_per_address_get_429_with_retry_after_and_nothing_recorded() -> None:
    # One request, then one more every 100 s: the second is refused whatever the machine's speed.
    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform("127.0.0.1", 0, limits=ClientLimits(messages_per_second_per_address=0.01))
    async with helper, _client("127.0.0.1") as http, _client("127.0.0.2") as other:
        answer = await http.post(platform.url, json=_rpc_send("hi", "first"))
        assert answer.json()["result"]["status"]["state"] == "completed"
        for client in (http, other):  # 127.0.0.2 is the same machine: no fresh bucket there
            response = await client.post(platform.url, json=_rpc_send("more", "flood"))
            assert response.status_code == 429 and "requests per second" in _refusal(response)
            assert 1 <= int(response.headers["retry-after"]) <= 100
        assert await helper.log.sessions() == ["a2a-first"]


async def test_open_requests_are_bounded_per_address_and_in_all() -> None:
    release = asyncio.Event()
    agent = _waiting_agent(release)
    per_address = agent.use_a2a_platform("127.0.0.1", 0, limits=ClientLimits(max_connections_per_address=2))
    async with agent, _client("127.0.0.3") as http:
        async with _held_streams(per_address, ["127.0.0.1", "127.0.0.2"], release):
            response = await http.post(per_address.url, json=_rpc_send("one more", "third"))
            assert response.status_code == 429 and "open at once" in _refusal(response)
            assert response.headers["retry-after"] == "1"
            assert not per_address.has_client("a2a-third")
        # The streams ended: their places are free again.
        answer = await http.post(per_address.url, json=_rpc_send("now", "third"))
        assert answer.json()["result"]["status"]["state"] == "completed"

    release = asyncio.Event()
    agent = _waiting_agent(release)
    limits = ClientLimits(max_connections=2, max_connections_per_address=None)
    in_all = agent.use_a2a_platform("127.0.0.1", 0, limits=limits)
    async with agent, _client() as http:
        async with _held_streams(in_all, ["127.0.0.1", "127.0.0.1"], release):
            response = await http.get(in_all.url + ".well-known/agent-card.json")
            assert response.status_code == 503 and "its limit" in _refusal(response)
            assert response.headers["retry-after"] == "1"
        assert (await http.get(in_all.url + ".well-known/agent-card.json")).status_code == 200


async def test_loopback_and_ipv4_mapped_addresses_count_as_one_on_a_dual_stack_server() -> None:
    """On ``::`` a client on 127.0.0.1 is ``::ffff:127.0.0.1``, one on ::1 is ``::1``: both this machine."""
    release = asyncio.Event()
    agent = _waiting_agent(release)
    platform = agent.use_a2a_platform("::", 0, limits=ClientLimits(max_connections_per_address=2))
    async with agent, _client("127.0.0.5") as http:
        url = f"http://127.0.0.1:{platform.port}/"
        held = ["127.0.0.1", "::1"]
        async with _held_streams(platform, held, release):
            response = await http.post(url, json=_rpc_send("one more", "third"))
            assert response.status_code == 429
        answer = await http.post(url, json=_rpc_send("now", "third"))
        assert answer.json()["result"]["status"]["state"] == "completed"


# -- the body's size --------------------------------------------------------------------------------


async def _raw_status(port: int, head: str, body_parts: list[bytes]) -> str:
    """Send a request's head and these parts of its body (not necessarily all of it), then read the status
    line: it comes only if the server answers without waiting for the rest."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head.encode("latin-1"))
        for part in body_parts:
            writer.write(part)
        await writer.drain()
        return (await asyncio.wait_for(reader.readline(), 10)).decode("latin-1")
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def test_a_body_over_the_limit_is_413_before_it_is_read_and_nothing_is_recorded() -> None:
    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform("127.0.0.1", 0, max_body_size=1024)
    async with helper, _client() as http:
        near = _rpc_send("x" * 800, "fits")
        assert (await http.post(platform.url, json=near)).json()["result"]["status"]["state"] == "completed"
        over = json.dumps(_rpc_send("x" * 2000, "too-long")).encode()
        response = await http.post(platform.url, content=over, headers={"Content-Type": "application/json"})
        assert response.status_code == 413 and "longer than 1,024 bytes" in _refusal(response)

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(over), 256):
                yield over[start : start + 256]

        response = await http.post(platform.url, content=chunks(), headers={"Content-Type": "application/json"})
        assert response.status_code == 413 and response.request.headers["transfer-encoding"] == "chunked"
        # A body said to be a gigabyte, of which the server has 100 bytes: refused at once, not awaited.
        head = (
            f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{platform.port}\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000000000\r\n\r\n"
        )
        assert " 413 " in await _raw_status(platform.port, head, [over[:100]])
        # Chunks that pass the limit without an end: refused once they do.
        head = (
            f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{platform.port}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        )
        parts = [b"200\r\n" + b"x" * 512 + b"\r\n"] * 3
        assert " 413 " in await _raw_status(platform.port, head, parts)
        assert await helper.log.sessions() == ["a2a-fits"]


def test_the_body_limit_must_be_a_positive_number_of_bytes() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigurationError, match="max_body_size"):
            A2APlatform("127.0.0.1", 0, max_body_size=bad)  # type: ignore[arg-type]


# -- what the server does not serve ----------------------------------------------------------------------


async def test_a_websocket_is_refused_before_the_app_and_lifespan_passes() -> None:
    seen: list[str] = []
    started: list[bool] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        started.append(True)
        yield

    inner = Starlette(lifespan=lifespan)

    async def probe(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])
        await inner(scope, receive, send)

    guard = CallerGuard(probe, bound_host="127.0.0.1", port=0, allowed_hosts=["*"], allowed_origins=None,
                        auth_token=None)  # fmt: skip
    server = uvicorn.Server(uvicorn.Config(guard, host="127.0.0.1", port=0, lifespan="on", log_level="warning"))
    serving = asyncio.ensure_future(server.serve())
    try:
        await _until(lambda: server.started or serving.done(), "the server started")
        port = server.servers[0].sockets[0].getsockname()[1]
        with pytest.raises(InvalidStatus) as refused:
            await connect(f"ws://127.0.0.1:{port}/")
        assert refused.value.response.status_code == 403
        assert seen == ["lifespan"] and started == [True]
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)


async def test_a_websocket_to_the_a2a_server_is_refused_and_records_nothing() -> None:
    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform("127.0.0.1", 0)
    async with helper:
        with pytest.raises(InvalidStatus) as refused:
            await connect(f"ws://127.0.0.1:{platform.port}/")
        assert refused.value.response.status_code == 403
        assert await helper.log.sessions() == []


# -- CORS on refusals, and "*" ------------------------------------------------------------------------------


async def test_refusals_carry_cors_headers_for_allowed_origins_only() -> None:
    helper = _helper_agent("memory://")
    options: dict[str, Any] = {"allowed_origins": ["https://app.example"], "auth_token": "page-token"}
    platform = helper.use_a2a_platform("127.0.0.1", 0, max_body_size=1024, **options)
    # One request, then one every 100 s.
    limited = helper.use_a2a_platform("127.0.0.1", 0, limits=ClientLimits(messages_per_second_per_address=0.01),
                                      **options)  # fmt: skip
    page = {"Origin": "https://app.example", "Authorization": "Bearer page-token"}
    evil = {**page, "Origin": "https://evil.example"}
    async with helper, _client() as http:
        refusals = [
            (401, {**page, "Authorization": "Bearer wrong"}, _rpc_send("hi", "cors")),
            (403, {**page, "Host": "attacker.example"}, _rpc_send("hi", "cors")),
            (413, page, _rpc_send("x" * 2000, "cors")),
            (415, {**page, "Content-Type": "text/plain"}, _rpc_send("hi", "cors")),
        ]
        for status, headers, body in refusals:
            response = await http.post(
                platform.url, content=json.dumps(body), headers={"Content-Type": "application/json", **headers}
            )
            assert response.status_code == status, response.text
            assert response.headers["access-control-allow-origin"] == "https://app.example", status
            assert "Retry-After" in response.headers["access-control-expose-headers"]
            # Another site's page is told nothing.
            response = await http.post(
                platform.url, content=json.dumps(body), headers={"Content-Type": "application/json", **headers, **evil}
            )
            assert response.status_code == 403 and "access-control-allow-origin" not in response.headers
        assert (await http.post(limited.url, json=_rpc_send("hi", "cors"), headers=page)).status_code == 200
        response = await http.post(limited.url, json=_rpc_send("again", "cors"), headers=page)
        assert response.status_code == 429 and response.headers["access-control-allow-origin"] == "https://app.example"
        assert "Retry-After" in response.headers["access-control-expose-headers"] and response.headers["retry-after"]
        response = await http.post(limited.url, json=_rpc_send("again", "cors"), headers=evil)
        assert response.status_code == 429 and "access-control-allow-origin" not in response.headers
        assert await helper.log.sessions() == ["a2a-cors"]


async def test_any_origin_needs_a_token_and_gets_a_literal_star() -> None:
    with pytest.raises(ConfigurationError, match="auth_token"):
        A2APlatform("127.0.0.1", 0, allowed_origins=["*"])
    with pytest.raises(ConfigurationError, match="auth_token"):
        Agent("a", log="memory://").use_a2a_platform("127.0.0.1", 0, allowed_origins=["https://app.example", "*"])
    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform("127.0.0.1", 0, allowed_origins=["*"], auth_token="public-api-key")
    async with helper, _client() as http:
        origin = {"Origin": "https://anywhere.example"}
        preflight = await http.options(
            platform.url,
            headers={**origin, "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "authorization, content-type"},
        )  # fmt: skip
        assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-credentials" not in preflight.headers
        response = await http.post(
            platform.url, json=_rpc_send("hi", "star"), headers={**origin, "Authorization": "Bearer public-api-key"}
        )
        assert response.json()["result"]["status"]["state"] == "completed"
        assert response.headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-credentials" not in response.headers
        refused = await http.post(platform.url, json=_rpc_send("hi", "star"), headers=origin)
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == "*"
        assert await helper.log.sessions() == ["a2a-star"]
