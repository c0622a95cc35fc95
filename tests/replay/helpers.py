"""Helpers shared by the replay tests."""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

from baf.log import open_log
from baf.log.record import Record

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
GOLDEN_DB = GOLDEN_DIR / "golden.db"
GOLDEN_SESSION = "golden-1"


def copy_golden(tmp_path: Path) -> Path:
    """A private copy of the golden log: opening a SQLite log may write next to the file."""
    target = tmp_path / "golden.db"
    shutil.copyfile(GOLDEN_DB, target)
    return target


async def read_records(path: Path, session_id: str = GOLDEN_SESSION) -> list[Record]:
    """The session's records, read through the SQLite store (and so through the upcasters)."""
    async with open_log(f"sqlite:///{path}") as log:
        return await log.read(session_id)


def read_records_sync(path: Path, session_id: str = GOLDEN_SESSION) -> list[Record]:
    """:func:`read_records` for sync tests."""
    return asyncio.run(read_records(path, session_id))


def golden_maker() -> ModuleType:
    """``tests/fixtures/golden/make_golden.py`` as a module (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location("make_golden", GOLDEN_DIR / "make_golden.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
