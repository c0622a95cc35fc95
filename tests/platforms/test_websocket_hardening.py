"""The WebSocket platform against hostile clients: duplicated headers, connection floods, session and
message floods. Real websockets on loopback; every loop is bounded."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from baf.platforms.limits import ClientLimits, RateLimiter
from baf.platforms.websocket import WebSocketPlatform

from .helpers import Client, body_agent, echo
from .test_websocket_protocol import raw_status, serving, upgrade


@pytest.mark.parametrize("header", ["Host", "Origin", "Authorization", "Upgrade"])
async def test_a_duplicated_header_gets_400_and_no_error_log(header: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with serving(body_agent(echo), auth_token="open-sesame") as platform:
        host = f"127.0.0.1:{platform.port}"
        values = {
            "Host": host,
            "Origin": f"http://{host}",
            "Authorization": "Bearer open-sesame",
            "Upgrade": "websocket",
        }
        request = upgrade(host, f"http://{host}").replace(
            "\r\n\r\n", f"\r\nAuthorization: Bearer open-sesame\r\n{header}: {values[header]}\r\n\r\n"
        )
        if header in ("Host", "Origin"):  # the UI's files are refused as well
            twice = f"GET / HTTP/1.1\r\nHost: {host}\r\n{header}: {values[header]}\r\n{header}: x\r\n\r\n"
            assert " 400 " in await raw_status(platform.port, twice)
        caplog.clear()
        for _ in range(20):
            assert " 400 " in await raw_status(platform.port, request)
        problems = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
        assert problems == []
        per_request = [r for r in caplog.records if "400" in r.getMessage()]
        assert len(per_request) <= 20 and all(len(r.getMessage()) < 120 for r in caplog.records)
        # The same request with the header once is fine.
        single = upgrade(host, f"http://{host}").replace("\r\n\r\n", "\r\nAuthorization: Bearer open-sesame\r\n\r\n")
        assert " 101 " in await raw_status(platform.port, single)


async def test_an_origin_or_path_no_url_parser_reads_is_refused_without_an_error_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An unclosed IPv6 bracket (``Origin: http://[``, ``GET //[/ws``) makes the URL parser raise: refused,
    not a 500 with a traceback in the log per request."""
    caplog.set_level(logging.INFO)
    async with serving(body_agent(echo)) as platform:
        host = f"127.0.0.1:{platform.port}"
        assert " 403 " in await raw_status(platform.port, upgrade(host, "http://["))
        assert " 400 " in await raw_status(
            platform.port, upgrade(host, f"http://{host}").replace("GET /ws", "GET //[/ws")
        )
        assert " 101 " in await raw_status(platform.port, upgrade(host, f"http://{host}"))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []


async def open_from(platform: WebSocketPlatform, address: str) -> Client:
    """A client connecting from source ``address`` (any 127.x.y.z is this machine on Linux)."""
    return await Client.open(platform.ws_url, local_addr=(address, 0))


async def test_connections_are_bounded_per_address_and_every_loopback_address_is_one() -> None:
    """127.0.0.2, 127.0.0.3 ... all reach a server on 127.0.0.1: they are this machine, one address."""
    limits = ClientLimits(max_connections=None, max_connections_per_address=2)
    async with serving(body_agent(echo), limits=limits) as platform:
        first = [await open_from(platform, address) for address in ("127.0.0.1", "127.0.0.2")]
        for address in ("127.0.0.1", "127.0.0.3"):
            with pytest.raises(InvalidStatus) as refused:
                await open_from(platform, address)
            assert refused.value.response.status_code == 503
            assert b"per address" in refused.value.response.body
        await first[0].close()
        await _until(lambda: platform.connection_count == 1)
        again = await open_from(platform, "127.0.0.4")  # a closed connection frees its place
        await again.hello()
        await first[1].hello()
        assert platform.connection_count == 2


async def test_connections_are_bounded_in_all() -> None:
    limits = ClientLimits(max_connections=3, max_connections_per_address=None)
    async with serving(body_agent(echo), limits=limits) as platform:
        clients = [await open_from(platform, "127.0.0.1") for _ in range(3)]
        with pytest.raises(InvalidStatus) as full:
            await open_from(platform, "127.0.0.1")
        assert full.value.response.status_code == 503
        assert b"the server has 3 connections" in full.value.response.body
        await clients[0].close()
        await _until(lambda: platform.connection_count == 2)
        again = await open_from(platform, "127.0.0.1")
        await again.hello()
        assert platform.connection_count == 3


def test_the_limiter_counts_one_address_per_client_and_others_apart() -> None:
    """Addresses one client can have many of count as one: loopback, IPv4 as IPv4-mapped IPv6, an IPv6 /64.
    Other addresses get their own places (a server on loopback sees no other: tested here on the limiter)."""
    limiter = RateLimiter(ClientLimits(max_connections=None, max_connections_per_address=2))
    for one_client in (
        ["127.0.0.1", "127.200.0.9", "::1", "::ffff:127.0.0.2"],
        ["192.0.2.7", "::ffff:192.0.2.7"],
        ["2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2:abcd::9"],
        ["fe80::1%eth0", "fe80::2%eth0"],
    ):
        budgets = [limiter.connect(address) for address in one_client[:2]]
        assert all(budget is not None for budget in budgets), one_client
        for address in one_client[2:] or one_client[:1]:
            assert limiter.connect(address) is None, address
            assert "per address" in (limiter.refusal(address) or "")
    for elsewhere in ("192.0.2.8", "2001:db8:1:3::1", "10.0.0.1"):
        assert limiter.connect(elsewhere) is not None, elsewhere


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def test_connections_opened_together_cannot_pass_the_bound() -> None:
    async with serving(body_agent(echo), limits=ClientLimits(max_connections=2)) as platform:
        attempts = await asyncio.gather(*(Client.open(platform.ws_url) for _ in range(12)), return_exceptions=True)
        alive = []
        for attempt in attempts:
            if isinstance(attempt, Client):
                try:
                    await attempt.hello()
                    alive.append(attempt)
                except (ConnectionClosed, TimeoutError):
                    pass
            else:
                assert isinstance(attempt, InvalidStatus | ConnectionClosed), attempt
        assert len(alive) <= 2 and platform.connection_count <= 2


async def test_new_sessions_are_limited_per_connection_and_resuming_is_not() -> None:
    limits = ClientLimits(new_sessions_per_connection=2, new_sessions_per_address=None)
    async with serving(body_agent(echo), limits=limits) as platform:
        client = await Client.open(platform.ws_url)
        first = await client.hello()
        await client.send({"type": "reset"})
        await client.until("welcome")
        for kind in ("reset", "hello"):
            await client.send({"type": kind})
            refused = await client.recv()
            assert refused["code"] == "rate_limited" and "new sessions" in refused["message"]
            assert 0 < refused["retry_after"] <= 30
        resumed = await client.hello(resume=first["resume_token"])  # resuming starts nothing new
        assert resumed["resumed"] is True
        await client.send({"type": "message", "text": "still here"})
        assert (await client.until("reply"))[0]["text"] == "echo: still here"
        fresh = await Client.open(platform.ws_url)  # the limit is this connection's
        await fresh.hello()


async def test_new_sessions_are_limited_per_address_across_connections() -> None:
    limits = ClientLimits(new_sessions_per_connection=None, new_sessions_per_address=3)
    async with serving(body_agent(echo), limits=limits) as platform:
        started = 0
        for _ in range(3):  # one new connection per session: the per-address bucket sees them all
            client = await open_from(platform, "127.0.0.1")
            await client.hello()
            started += 1
            await client.close()
        for address in ("127.0.0.1", "127.0.0.2"):  # another loopback address is the same machine
            late = await open_from(platform, address)
            await late.send({"type": "hello"})
            assert (await late.recv())["code"] == "rate_limited"
        assert started == 3


async def test_frames_per_second_are_limited_with_a_clear_error_and_recover() -> None:
    limits = ClientLimits(messages_per_second=4, messages_per_second_per_address=None)
    async with serving(body_agent(echo), limits=limits) as platform:
        client = await Client.open(platform.ws_url)
        await client.hello()  # one frame of the four
        for i in range(10):
            await client.send({"type": "message", "text": f"m{i}"})
        frames = await client.drain(0.3)
        limited = [f for f in frames if f["type"] == "error" and f["code"] == "rate_limited"]
        replies = [f["text"] for f in frames if f["type"] == "reply"]
        assert len(limited) >= 6 and len(replies) <= 4
        assert "frames per second" in limited[0]["message"] and limited[0]["retry_after"] > 0
        await asyncio.sleep(0.5)  # two tokens back
        await client.send({"type": "message", "text": "later"})
        assert (await client.until("reply"))[0]["text"] == "echo: later"


async def test_frames_per_second_are_limited_per_address() -> None:
    limits = ClientLimits(messages_per_second=None, messages_per_second_per_address=5)
    async with serving(body_agent(echo), limits=limits) as platform:
        # Three loopback addresses: one machine, one bucket of 5 for the 9 frames.
        clients = [await open_from(platform, f"127.0.0.{i}") for i in (1, 2, 3)]
        for client in clients:
            for _ in range(3):
                await client.send({"type": "hello"})
        codes = [f.get("code") for client in clients for f in await client.drain(0.2) if f["type"] == "error"]
        assert codes.count("rate_limited") >= 3


def test_the_limiter_forgets_clients_that_left() -> None:
    now = [0.0]
    limiter = RateLimiter(ClientLimits(), clock=lambda: now[0])
    for i in range(5000):
        address = f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"
        budget = limiter.connect(address)
        assert budget is not None
        assert budget.new_session() == 0 and budget.message() == 0
        limiter.disconnect(budget)
        now[0] += 0.1
    assert limiter.connections == 0
    assert limiter.addresses <= 1024 + 1


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="messages_per_second"):
        ClientLimits(messages_per_second=0)
    with pytest.raises(ValueError, match="max_connections"):
        ClientLimits(max_connections=True)  # type: ignore[arg-type]
