"""A PostgreSQL server for the tests: the one CI started (``BAF_TEST_POSTGRES_DSN``), or a throwaway one.

Without ``BAF_TEST_POSTGRES_DSN`` the tests start their own cluster with ``.ci/postgres`` (the script CI
uses) when PostgreSQL is installed. Under CI (``CI`` set) a missing server fails the run: the PostgreSQL
tests never skip there.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import pytest

if TYPE_CHECKING:
    import asyncpg

SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "postgres"


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yield the DSN of a running server, stopping it afterwards if this process started it."""
    dsn = os.environ.get("BAF_TEST_POSTGRES_DSN")
    if dsn:
        yield dsn
        return
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        message = "PostgreSQL is not installed and BAF_TEST_POSTGRES_DSN is not set"
        if os.environ.get("CI"):
            pytest.fail(f"{message}: the PostgreSQL tests must run in CI", pytrace=False)
        pytest.skip(message)
    folder = tempfile.mkdtemp(prefix="baf-pg-")
    cluster = os.path.join(folder, "pg")
    try:
        started = subprocess.run(
            ["bash", str(SCRIPT), "start", cluster], capture_output=True, text=True, timeout=120, check=False
        )
        if started.returncode != 0:
            pytest.fail(f"could not start PostgreSQL: {started.stderr[-2000:]}", pytrace=False)
        yield started.stdout.strip()
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", cluster], capture_output=True, timeout=60, check=False)
        shutil.rmtree(folder, ignore_errors=True)


def with_search_path(dsn: str, schema: str) -> str:
    """``dsn`` with ``search_path`` set to ``schema`` (asyncpg passes unknown query keys as settings)."""
    parts = urlsplit(dsn)
    query = "&".join(q for q in (parts.query, urlencode({"search_path": schema})) if q)
    return urlunsplit(parts._replace(query=query))


async def fresh_schema(dsn: str) -> tuple[str, str]:
    """Create an empty schema; return (its name, a DSN whose tables live in it)."""
    import asyncpg

    name = f"t_{uuid.uuid4().hex[:12]}"
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(f'CREATE SCHEMA "{name}"')
    finally:
        await connection.close()
    return name, with_search_path(dsn, name)


async def drop_schema(dsn: str, name: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await connection.close()


def _schema_of(query: str) -> str:
    """The schema a DSN's query string puts first (``search_path``), else ``public``."""
    return dict(q.split("=", 1) for q in query.split("&") if "=" in q).get("search_path", "public")


async def _end_connections_of(admin: asyncpg.Connection, role: str) -> None:
    """Terminate the connections of ``role`` and wait until they are gone: DROP ROLE fails while they live,
    and terminated backends end within moments."""
    await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
    for _ in range(1500):
        if not await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role):
            return
        await asyncio.sleep(0.02)


@asynccontextmanager
async def role_without_rights(dsn: str) -> AsyncIterator[str]:
    """The DSN of a new role that may log in and use the schema of ``dsn`` (as every role may use ``public``),
    granted nothing on any table: another user of a shared database. Dropped on exit, its connections first."""
    import asyncpg

    parts = urlsplit(dsn)
    schema = _schema_of(parts.query)
    role, password = f"baf_other_{secrets.token_hex(4)}", secrets.token_hex(16)
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        await admin.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
        host = parts.netloc.rsplit("@", 1)[-1]
        yield urlunsplit(parts._replace(netloc=f"{role}:{quote(password)}@{host}"))
    finally:
        await _end_connections_of(admin, role)
        await admin.execute(f"DROP OWNED BY {role}")
        await admin.execute(f"DROP ROLE {role}")
        await admin.close()


@asynccontextmanager
async def role_through_set_role(dsn: str) -> AsyncIterator[str]:
    """The DSN of a new role that reaches the tables of ``dsn``'s schema only through ``SET ROLE``: it logs in
    as a member of the role owning them that does not inherit its rights (``NOINHERIT``), and takes that role
    at every login (``ALTER ROLE ... SET role``), as databases that keep their owner apart from their logins
    do. Dropped on exit, its connections and what its owner role made first."""
    import asyncpg

    parts = urlsplit(dsn)
    schema = _schema_of(parts.query)
    suffix = secrets.token_hex(4)
    owner, login, password = f"baf_owner_{suffix}", f"baf_login_{suffix}", secrets.token_hex(16)
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f"CREATE ROLE {owner} NOLOGIN")
        await admin.execute(f'GRANT USAGE, CREATE ON SCHEMA "{schema}" TO {owner}')
        await admin.execute(f"CREATE ROLE {login} LOGIN NOINHERIT PASSWORD '{password}' IN ROLE {owner}")
        await admin.execute(f"ALTER ROLE {login} SET role = {owner}")
        host = parts.netloc.rsplit("@", 1)[-1]
        yield urlunsplit(parts._replace(netloc=f"{login}:{quote(password)}@{host}"))
    finally:
        await _end_connections_of(admin, login)
        await admin.execute(f"DROP OWNED BY {owner}, {login}")
        await admin.execute(f"DROP ROLE {login}")
        await admin.execute(f"DROP ROLE {owner}")
        await admin.close()
