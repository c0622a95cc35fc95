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


class TestScanningDefaults(SessionLogContract):
    async def make_log(self, tmp_path: Path) -> SessionLog:
        return _ScanningDefaults()
