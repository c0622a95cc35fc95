"""A PostgreSQL log whose schema was damaged by hand (a table dropped, a version that is not a number):
refused when opened, naming what is wrong, by the store and by every reading command (no traceback)."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest
from baf_test_helpers import baf

from baf.errors import LogError
from baf.log import Record
from baf.log.postgres import SCHEMA_VERSION, PostgresLog


async def execute(dsn: str, sql: str) -> None:
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def a_log(dsn: str) -> None:
    async with PostgresLog(dsn) as log:
        await log.append([Record("s", 1, "note", {"text": "hi"}, 1.5, 1)])


@pytest.mark.parametrize("table", ["baf_records", "baf_inbox"])
async def test_a_log_missing_one_of_its_tables_is_refused_naming_it(postgres_dsn: str, table: str) -> None:
    await a_log(postgres_dsn)
    await execute(postgres_dsn, f"DROP TABLE {table}")
    for read_only in (True, False):
        log = PostgresLog(postgres_dsn, read_only=read_only)
        with pytest.raises(LogError, match=f"schema is version {SCHEMA_VERSION}, but its table {table} is missing"):
            await log.start()


async def test_a_log_missing_several_tables_names_them_all(postgres_dsn: str) -> None:
    await a_log(postgres_dsn)
    await execute(postgres_dsn, "DROP TABLE baf_inbox; DROP TABLE baf_leases")
    with pytest.raises(LogError, match="but its tables baf_leases, baf_inbox are missing"):
        await PostgresLog(postgres_dsn, read_only=True).start()


async def test_the_reading_commands_name_a_missing_table_without_a_traceback(postgres_dsn: str, tmp_path: Path) -> None:
    await a_log(postgres_dsn)
    await execute(postgres_dsn, "DROP TABLE baf_records")
    for command in (["sessions"], ["log"], ["check"], ["replay"], ["export"]):
        args = [*command, postgres_dsn, *(["s"] if command == ["export"] else [])]
        result = baf(*args, cwd=tmp_path)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert "baf_records is missing" in result.stderr and "Traceback" not in result.stderr, command


async def test_a_schema_version_of_digits_int_cannot_read_is_not_a_baf_log(postgres_dsn: str, tmp_path: Path) -> None:
    await a_log(postgres_dsn)
    await execute(postgres_dsn, "UPDATE baf_meta SET value = '²' WHERE key = 'schema_version'")
    with pytest.raises(LogError, match="baf_meta has no valid schema_version"):
        await PostgresLog(postgres_dsn, read_only=True).start()
    result = baf("sessions", postgres_dsn, cwd=tmp_path)
    assert result.returncode == 2 and "baf_meta has no valid schema_version" in result.stderr, result.stderr
