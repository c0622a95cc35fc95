"""Helpers shared by test files of different folders: running the ``baf`` command, and looking at a file
without changing it. (On the path through ``pythonpath`` in pyproject.toml; fixtures live in conftest.py.)"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path


def baf(
    *args: str, cwd: Path, stdin: str = "", columns: int = 200, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m baf.cli ARGS`` in ``cwd`` and return the finished process.

    The environment is this one without the ``OPENAI_*`` variables (no test reaches a real model), plus
    ``COLUMNS`` and ``env``.
    """
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    environ.update(COLUMNS=str(columns), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "baf.cli", *args],
        cwd=cwd, input=stdin, capture_output=True, text=True, timeout=60, env=environ,
    )  # fmt: skip


def digest(path: Path) -> str:
    """The SHA-256 of the file's bytes: equal before and after means the file was not changed."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def query(path: Path, sql: str) -> list[tuple[object, ...]]:
    """``sql`` on a read-only connection of our own, so that looking does not change the file."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()
