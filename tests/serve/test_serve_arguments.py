"""``baf serve`` given numbers no worker can run with: refused in one line before any worker starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from baf_test_helpers import baf

from baf.log.postgres import PostgresLog
from baf.log.postgres_leases import Leases
from baf.serve import Worker

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


def test_more_workers_than_the_database_can_ever_connect_are_refused_before_any_starts(
    postgres_dsn: str, tmp_path: Path
) -> None:
    result = baf("serve", str(FIXTURE), "--log", postgres_dsn, "--workers", "100000", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "100,000 workers need up to 700,000 database connections (7 each)" in result.stderr, result.stderr
    assert "(max_connections): start at most" in result.stderr
    assert "READY" not in result.stdout and "worker" not in result.stderr.split("need")[1]


async def test_a_worker_refuses_a_poll_interval_or_lease_ttl_it_could_not_keep(postgres_dsn: str) -> None:
    for poll_interval in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="poll_interval must be a finite number of seconds"):
            Worker(fresh_agent(), postgres_dsn, poll_interval=poll_interval)
    log = PostgresLog(postgres_dsn, worker_id="w")
    for ttl in (float("nan"), float("inf"), 1e12, 0.0):
        with pytest.raises(ValueError, match="ttl must be > 0 and at most 86400 seconds"):
            Leases(log, ttl=ttl)
