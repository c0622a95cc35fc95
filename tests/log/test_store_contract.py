"""Every store baf ships passes the same contract suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from baf.log import MemoryLog, SessionLog, SQLiteLog
from baf.log.postgres import PostgresLog
from baf.testing.store_contract import SessionLogContract


class TestMemoryLog(SessionLogContract):
    async def make_log(self, tmp_path: Path) -> SessionLog:
        return MemoryLog()


class TestSQLiteLog(SessionLogContract):
    async def make_log(self, tmp_path: Path) -> SessionLog:
        return SQLiteLog(tmp_path / "log.db")


class TestSQLiteLogFullDurability(SessionLogContract):
    async def make_log(self, tmp_path: Path) -> SessionLog:
        return SQLiteLog(tmp_path / "nested" / "dirs" / "log.db", durability="full")


class TestPostgresLog(SessionLogContract):
    @pytest.fixture(autouse=True)
    def _dsn(self, postgres_dsn: str) -> None:
        self.dsn = postgres_dsn

    async def make_log(self, tmp_path: Path) -> SessionLog:
        return PostgresLog(self.dsn)


class _ScanningDefaults(MemoryLog):
    """A store that keeps no index: the ``SessionLog`` defaults fold every session instead."""

    unfinished_sessions = SessionLog.unfinished_sessions
    read_for_load = SessionLog.read_for_load
    read_last = SessionLog.read_last


class TestScanningDefaults(SessionLogContract):
    async def make_log(self, tmp_path: Path) -> SessionLog:
        return _ScanningDefaults()


@pytest.mark.slow
def test_the_kit_runs_without_pytest_asyncio_auto_mode(tmp_path: Path) -> None:
    """A user's project in pytest-asyncio's default strict mode runs the store kit as it is."""
    import subprocess
    import sys

    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = strict\n")
    (tmp_path / "test_mine.py").write_text(
        "from baf.log import MemoryLog\n"
        "from baf.testing.store_contract import SessionLogContract\n\n"
        "class TestMine(SessionLogContract):\n"
        "    async def make_log(self, tmp_path):\n"
        "        return MemoryLog()\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "pytest.ini", "test_mine.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout and "error" not in result.stdout
