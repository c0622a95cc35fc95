"""Fixtures shared by the tests of workers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from baf.serve import Worker

from .helpers import fresh_agent


@pytest.fixture
async def worker(postgres_dsn: str) -> AsyncIterator[Worker]:
    """One started worker (id ``a``) of the fixture agent, stopped after the test."""
    a = Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=1)
    await a.start()
    try:
        yield a
    finally:
        await a.stop()
