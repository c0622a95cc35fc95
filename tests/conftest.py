"""Shared fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pg_cluster import drop_schema, fresh_schema, postgres_server, role_without_rights

from baf.testing import RecordingPlatform


@pytest.fixture
def platform() -> RecordingPlatform:
    return RecordingPlatform()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'baf.db'}"


@pytest.fixture(params=["memory", "sqlite"])
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Runs a test once with each store."""
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'baf.db'}"


@pytest.fixture(scope="session")
def postgres_server_dsn() -> Iterator[str]:
    """A running PostgreSQL server for the whole test run (see ``pg_cluster``)."""
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture
async def postgres_dsn(postgres_server_dsn: str) -> AsyncIterator[str]:
    """A DSN whose tables live in a new, empty schema, dropped after the test."""
    name, dsn = await fresh_schema(postgres_server_dsn)
    try:
        yield dsn
    finally:
        await drop_schema(postgres_server_dsn, name)


@pytest.fixture
async def other_role_dsn(postgres_dsn: str) -> AsyncIterator[str]:
    """The DSN of another role of the database, granted nothing on baf's tables (``role_without_rights``)."""
    async with role_without_rights(postgres_dsn) as dsn:
        yield dsn
