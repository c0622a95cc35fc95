"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

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
