"""A server that takes the connection and never answers (a stuck proxy, a firewall that accepts): the
store gives up after ``connect_timeout`` with a message that says so, not an empty reason. A server that
is not there at all (nothing listens on the port, no socket file) is named as what to check."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from baf.errors import LogError
from baf.log.postgres import PostgresLog


async def test_a_server_that_never_answers_is_a_log_error_saying_so() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel accepts connections; nobody ever reads or writes them
        port = silent.getsockname()[1]
        log = PostgresLog(f"postgresql://baf:pw-not-shown@127.0.0.1:{port}/db", connect_timeout=0.5)
        with pytest.raises(LogError) as raised:
            await log.start()
    message = str(raised.value)
    assert message.endswith("the server did not answer within 0.5 s (connect_timeout)"), message
    assert "pw-not-shown" not in message


def _closed_port() -> int:
    """A local port nothing listens on (bound, then closed: a connection to it is refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_refused_connection_asks_whether_the_server_is_running() -> None:
    log = PostgresLog(f"postgresql://baf:pw-not-shown@127.0.0.1:{_closed_port()}/db", connect_timeout=5)
    with pytest.raises(LogError) as raised:
        await log.start()
    message = str(raised.value)
    assert "Connect call failed" in message and "pw-not-shown" not in message, message
    assert message.endswith("(is the PostgreSQL server running and listening there?)"), message


async def test_a_missing_socket_file_asks_whether_the_server_is_running(tmp_path: Path) -> None:
    log = PostgresLog(f"postgresql://baf:pw-not-shown@/db?host={tmp_path / 'no-server'}", connect_timeout=5)
    with pytest.raises(LogError) as raised:
        await log.start()
    message = str(raised.value)
    assert "pw-not-shown" not in message
    assert message.endswith("(is the PostgreSQL server running and listening there?)"), message
    # A connection of its own (a listener's, the writer's) says the same.
    with pytest.raises(LogError, match=r"running and listening there\?\)$"):
        await log.open_connection()
