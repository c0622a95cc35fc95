"""bench/ab_workers.py with a server of the user's own (BAF_BENCH_POSTGRES_DSN): it makes no throwaway
cluster folder and never runs ``stop`` on one."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "ab_workers.py"


def test_with_a_server_given_no_cluster_is_made_stopped_or_left_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.spec_from_file_location("bench_ab_workers", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ran: list[list[str]] = []

    def record(command: list[str], **options: Any) -> subprocess.CompletedProcess[str]:
        ran.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("BAF_BENCH_POSTGRES_DSN", "postgresql://user@127.0.0.1:1/bench")
    monkeypatch.setattr(module, "run_round", lambda *args: [0.3, 1.0, None, 0.0])
    monkeypatch.setattr(module.subprocess, "run", record)
    monkeypatch.setattr(sys, "argv", ["ab_workers.py", str(tmp_path), "--rounds", "1"])
    module.main()
    assert ran == []  # no cluster started, none stopped
    assert list(temp.iterdir()) == []  # and no folder left in the temporary directory
