"""A server that takes the connection and never answers (a stuck proxy, a firewall that accepts): the
store gives up after ``connect_timeout`` with a message that says so, not an empty reason."""

from __future__ import annotations

import socket

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
