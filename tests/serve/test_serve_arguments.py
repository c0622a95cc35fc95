"""``baf serve`` given numbers no worker can run with: refused in one line before any worker starts."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from baf_test_helpers import baf

from baf.errors import ConfigurationError
from baf.log.postgres import PostgresLog
from baf.log.postgres_leases import Leases
from baf.serve import Worker
from baf.serve.process import _usable_connections, check_connections

from .helpers import FIXTURE, fresh_agent

UNREACHABLE = "postgresql://baf@127.0.0.1:9/none"


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--lease-ttl", "nan", "--lease-ttl must be positive and at most 86400 seconds"),
        ("--lease-ttl", "inf", "--lease-ttl must be positive and at most 86400 seconds"),
        ("--lease-ttl", "1e12", "--lease-ttl must be positive and at most 86400 seconds"),
        ("--poll-interval", "nan", "--poll-interval must be a finite number of seconds, at least 1"),
        ("--poll-interval", "inf", "--poll-interval must be a finite number of seconds, at least 1"),
    ],
)
def test_a_lease_ttl_or_poll_interval_that_is_not_a_finite_number_of_seconds_is_refused(
    tmp_path: Path, option: str, value: str, said: str
) -> None:
    result = baf("serve", str(FIXTURE), "--log", UNREACHABLE, option, value, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().startswith(f"baf serve: {said}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize("value", ["0.5", "-1", "nan", "inf"])
def test_a_keepalive_that_is_not_0_or_a_finite_number_of_seconds_is_refused(tmp_path: Path, value: str) -> None:
    result = baf("serve", str(FIXTURE), "--log", UNREACHABLE, "--keepalive", value, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    said = "baf serve: --keepalive must be 0 (the system's settings) or a finite number of seconds, at least 1"
    assert result.stderr.strip().startswith(said), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


async def test_more_workers_than_the_database_can_ever_connect_are_refused_before_any_starts(
    postgres_dsn: str, tmp_path: Path
) -> None:
    connection = await asyncpg.connect(postgres_dsn)
    try:
        most = int(await connection.fetchval("SELECT current_setting('max_connections')"))
        kept = int(await connection.fetchval("SELECT current_setting('superuser_reserved_connections')"))
        role, superuser = await connection.fetchrow(
            "SELECT rolname, rolsuper FROM pg_roles WHERE rolname = current_user"
        )
    finally:
        await connection.close()
    result = await asyncio.to_thread(
        baf, "serve", str(FIXTURE), "--log", postgres_dsn, "--workers", "100000", cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    said = "100,000 workers need up to 700,000 database connections (7 each: a reading pool of 4, a writer and two "
    assert said in result.stderr, result.stderr
    # What a role may open: the connections kept for superusers are not for workers.
    said = f"lets them open {most - kept:,} (max_connections {most:,}, less {kept} kept for superusers by "
    assert said in result.stderr, result.stderr
    # A superuser may use those connections too: the message says why the workers leave them anyway.
    said = f"; role {role!r} is a superuser and may use them, but baf serve leaves them for an administrator): start"
    assert (said in result.stderr) == superuser, result.stderr
    assert f"start at most {(most - kept) // 7:,}, or raise max_connections" in result.stderr
    assert "READY" not in result.stdout and "worker" not in result.stderr.split("need")[1]


@pytest.mark.parametrize("superuser", [True, False], ids=["superuser", "other role"])
def test_the_connections_kept_for_superusers_are_said_as_the_role_sees_them(superuser: bool) -> None:
    # max_connections, superuser_reserved_connections, reserved_connections, rolsuper, the role's and the
    # database's CONNECTION LIMIT (-1: none), their names.
    usable, why, remedy = _usable_connections((100, 3, 2, superuser, -1, "app", -1, "db"))
    assert (usable, remedy) == (95, "raise max_connections")
    kept = "max_connections 100, less 3 kept for superusers by superuser_reserved_connections and 2 for "
    assert why.startswith(kept + "pg_use_reserved_connections by reserved_connections"), why
    admin = "; role 'app' is a superuser and may use them, but baf serve leaves them for an administrator"
    assert why.endswith(admin) == superuser, why


async def test_a_worker_refuses_a_poll_interval_or_lease_ttl_it_could_not_keep(postgres_dsn: str) -> None:
    for poll_interval in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="poll_interval must be a finite number of seconds"):
            Worker(fresh_agent(), postgres_dsn, poll_interval=poll_interval)
    log = PostgresLog(postgres_dsn, worker_id="w")
    for ttl in (float("nan"), float("inf"), 1e12, 0.0):
        with pytest.raises(ValueError, match="ttl must be > 0 and at most 86400 seconds"):
            Leases(log, ttl=ttl)


@pytest.mark.parametrize("limited", ["role", "database"])
async def test_more_workers_than_the_connection_limit_of_the_role_or_database_are_refused(
    postgres_server_dsn: str, limited: str
) -> None:
    name = f"baf_limited_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(postgres_server_dsn)
    try:
        await admin.execute(f"CREATE ROLE {name} LOGIN" + (" CONNECTION LIMIT 10" if limited == "role" else ""))
        parts = urlsplit(postgres_server_dsn)
        netloc = f"{name}@{parts.hostname}:{parts.port}"
        if limited == "database":
            await admin.execute(f"CREATE DATABASE {name} CONNECTION LIMIT 10")
            parts = parts._replace(path=f"/{name}")
        dsn = urlunsplit(parts._replace(netloc=netloc))
        with pytest.raises(ConfigurationError) as refused:
            await check_connections(dsn, 2)
        said = (
            f"2 workers need up to 14 database connections (7 each: a reading pool of 4, a writer and two listeners), "
            f"and the server at {dsn} lets them open 10 (the CONNECTION LIMIT of {limited} {name!r}): start at most 1, "
            f"or raise it (ALTER {limited.upper()} ... CONNECTION LIMIT)"
        )
        assert str(refused.value) == said
        await check_connections(dsn, 1)  # one fits
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name}")
        await admin.execute(f"DROP ROLE IF EXISTS {name}")
        await admin.close()
