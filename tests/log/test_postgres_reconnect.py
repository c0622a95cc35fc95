"""A store whose connection to the server is lost: what its appenders and its start are told. Against a
real PostgreSQL server (see tests/pg_cluster.py), reached through a relay that cuts and refuses connections
(tests/pg_proxy.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import asyncpg
import pytest
from pg_proxy import Relay
from serve.helpers import eventually

from baf.errors import LogError, LogStorageError
from baf.log import Record, postgres
from baf.log.postgres import PostgresLog, redact_dsn


def rec(session_id: str, seq: int) -> Record:
    return Record(session_id, seq, "note", {"text": "hi"}, 1.5, 1)


def with_password(dsn: str) -> str:
    """``dsn`` with a password in it (the test server trusts every connection: it is never asked for)."""
    scheme, rest = dsn.split("://", 1)
    user, at, host = rest.partition("@")
    return f"{scheme}://{user}:pw-not-shown@{host}" if at else f"{scheme}://:pw-not-shown@{rest}"


async def test_an_append_the_writer_cannot_reconnect_for_says_nothing_was_sent(postgres_dsn: str) -> None:
    async with Relay(postgres_dsn) as relay:
        log = PostgresLog(relay.dsn)
        await log.start()
        try:
            await log.append([rec("s", 1)])
            await relay.refuse()  # the server is gone: its connections cut, new ones refused
            relay.cut()
            with pytest.raises(LogError):  # the loss, found on the commit or before it
                await log.append([rec("s", 2)])
            with pytest.raises(LogError) as raised:  # no connection now: the writer must make one first
                await log.append([rec("s", 2)])
            message = str(raised.value)
            assert "was not written" in message and "nothing of it was sent" in message, message
            assert "may still have been written" not in message, message  # no doubt where there is none
            await relay.start()  # the server is back: the next append reconnects
            await log.append([rec("s", 2)])
            assert [r.seq for r in await log.read("s")] == [1, 2]
        finally:
            await log.close()


async def test_a_connection_lost_as_the_writer_lock_is_taken_fails_start_with_the_stores_error(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = postgres.take_writer_lock

    async def lost_first(connection: asyncpg.Connection, *args: Any, **kwargs: Any) -> int | None:
        await connection.close()  # gone under the store: the driver's own error, not a PostgreSQL one
        return await real(connection, *args, **kwargs)

    monkeypatch.setattr(postgres, "take_writer_lock", lost_first)
    async with Relay(with_password(postgres_dsn)) as relay:
        log = PostgresLog(relay.dsn)
        with pytest.raises(LogStorageError) as raised:
            await log.start()
        message = str(raised.value)
        assert message.startswith(f"{redact_dsn(relay.dsn)}: cannot take the log's writer lock: "), message
        assert "pw-not-shown" not in message and isinstance(raised.value.__cause__, asyncpg.InterfaceError)
        await eventually(lambda: relay.open_connections == 0, "the failed start's connections were closed")
        monkeypatch.setattr(postgres, "take_writer_lock", real)
        async with log:  # a start after it opens the store as usual
            await log.append([rec("s", 1)])


# A plain process given an argument that is not UTF-8 (a Latin-1 file name): its command line names its
# writer connection, which other processes refused the log are shown.
NOT_UTF8_ARGUMENT = """
import asyncio, sys
from baf.log import Record
from baf.log.postgres import PostgresLog

async def main():
    async with PostgresLog(sys.argv[2]) as log:
        await log.append([Record("s", 1, "note", {"text": "hi"}, 1.5, 1)])
        async with log.connection() as connection:
            print(await connection.fetchval(
                "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'baf pid%'"
            ))

asyncio.run(main())
"""


@pytest.mark.slow
def test_a_process_given_an_argument_that_is_not_utf8_opens_a_log(postgres_dsn: str) -> None:
    command = [sys.executable, "-c", NOT_UTF8_ARGUMENT, b"caf\xe9.txt", postgres_dsn]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ": -c caf?.txt postgresql://" in ran.stdout, ran.stdout
