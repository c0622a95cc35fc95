"""TCP keepalive on every PostgreSQL connection baf opens (the writer's, the pool's, the listeners'), on the
client's socket and on the server's end, so that a half-open connection is given up. A network cut
without a reset cannot be made here without root; what is checked is that the options are set, on both
ends, as documented. Against a real PostgreSQL server (see tests/pg_cluster.py)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import AsyncIterator

import asyncpg
import pytest
from serve.helpers import fresh_agent

from baf.log import open_log
from baf.log.postgres import PostgresLog
from baf.log.postgres_connect import KEEPALIVE_SECONDS, Keepalive
from baf.log.postgres_inbox import Inbox
from baf.serve import Worker

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads its own sockets through /proc (Linux)")

Options = tuple[int, int, int, int, int]


def options_of(sock: socket.socket) -> Options:
    """SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT, TCP_USER_TIMEOUT of ``sock``."""
    return (
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
    )


def sockets_to(peer: tuple[str, int]) -> dict[str, Options]:
    """This process's TCP sockets connected to ``peer``, by inode, with their keepalive options."""
    found: dict[str, Options] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed meanwhile
        if not target.startswith("socket:"):
            continue
        try:
            sock = socket.socket(fileno=os.dup(int(name)))  # a duplicate: closing it leaves the original
        except OSError:
            continue
        try:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                if sock.getpeername()[:2] == peer:
                    found[target] = options_of(sock)
        except OSError:
            pass  # not connected
        finally:
            sock.close()
    return found


@pytest.fixture
async def server(postgres_dsn: str) -> AsyncIterator[tuple[str, int]]:
    """The server's TCP address, as this process's sockets see it."""
    connection = await asyncpg.connect(postgres_dsn)
    try:
        peer = connection._transport.get_extra_info("peername")  # type: ignore[attr-defined]
    finally:
        await connection.close()
    if not isinstance(peer, tuple):
        if os.environ.get("CI"):  # a service a test needs never skips there: CI's server is reached over TCP
            pytest.fail("BAF_TEST_POSTGRES_DSN reaches the server over a Unix socket: no TCP to keep alive")
        pytest.skip("the test server is reached over a Unix socket: no TCP to keep alive")
    yield str(peer[0]), int(peer[1])


async def server_side(log: PostgresLog) -> dict[str, str]:
    async with log.connection() as connection:
        rows = await connection.fetch(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_keepalives_count', 'tcp_user_timeout')"
        )
    return {row[0]: row[1] for row in rows}


def test_the_keepalive_is_split_to_give_up_after_the_seconds_asked_for() -> None:
    default = Keepalive(KEEPALIVE_SECONDS)
    assert (default.idle, default.interval, default.count, default.user_timeout_ms) == (10, 5, 4, 30_000)
    assert default.idle + default.interval * default.count == 30
    for bad in (0.5, 0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="keepalive must be a finite number of seconds, at least 1"):
            Keepalive(bad)


async def test_every_connection_of_a_store_keeps_alive_on_both_ends(postgres_dsn: str, server: tuple[str, int]) -> None:
    before = sockets_to(server)
    async with PostgresLog(postgres_dsn, keepalive=12) as log:
        stop = await Inbox(log).listen(lambda _channel, _session: None)
        try:
            opened = {inode: options for inode, options in sockets_to(server).items() if inode not in before}
            assert len(opened) >= 3  # the writer's, the pool's, the listener's
            assert set(opened.values()) == {(1, 4, 2, 4, 12_000)}, opened
            assert await server_side(log) == {
                "tcp_keepalives_idle": "4",
                "tcp_keepalives_interval": "2",
                "tcp_keepalives_count": "4",
                "tcp_user_timeout": "12000",
            }
        finally:
            await stop()


async def test_by_default_a_store_gives_a_silent_peer_up_after_30_seconds(
    postgres_dsn: str, server: tuple[str, int]
) -> None:
    before = sockets_to(server)
    async with PostgresLog(postgres_dsn) as log:
        opened = {inode: options for inode, options in sockets_to(server).items() if inode not in before}
        assert opened and set(opened.values()) == {(1, 10, 5, 4, 30_000)}, opened
        assert (await server_side(log))["tcp_user_timeout"] == "30000"


async def test_without_keepalive_the_systems_settings_stay(postgres_dsn: str, server: tuple[str, int]) -> None:
    before = sockets_to(server)
    async with PostgresLog(postgres_dsn, keepalive=None) as log:
        opened = {inode: options for inode, options in sockets_to(server).items() if inode not in before}
        assert opened and {options[0] for options in opened.values()} == {0}  # no SO_KEEPALIVE
        assert (await server_side(log))["tcp_user_timeout"] == "0"


async def test_a_setting_the_url_gives_is_kept(postgres_dsn: str, server: tuple[str, int]) -> None:
    dsn = f"{postgres_dsn}{'&' if '?' in postgres_dsn else '?'}tcp_keepalives_idle=7"
    log = open_log(dsn, keepalive=12)  # an option of open_log (and so of Agent(log=...)'s URL opening) too
    assert isinstance(log, PostgresLog)
    async with log:
        settings = await server_side(log)
    assert settings["tcp_keepalives_idle"] == "7" and settings["tcp_user_timeout"] == "12000"


async def test_a_workers_connections_keep_alive_too(postgres_dsn: str, server: tuple[str, int]) -> None:
    before = sockets_to(server)
    async with Worker(fresh_agent(), postgres_dsn, worker_id="w", keepalive=9) as worker:
        opened = {inode: options for inode, options in sockets_to(server).items() if inode not in before}
        assert len(opened) >= 1 + 4 + 1  # the writer's, the pool's four, the listener's
        assert set(opened.values()) == {(1, 3, 2, 3, 9_000)}, opened
        assert (await server_side(worker.log))["tcp_keepalives_idle"] == "3"
