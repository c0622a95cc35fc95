"""A database password holding '/', '?' or '#' that was not percent-encoded: URL parsers cut the password
there, and the rest is taken for the host, port or path, so messages that quote those parts would show
pieces of the password. baf hides all of it, and says how to write it."""

from __future__ import annotations

from pathlib import Path

import pytest
from baf_test_helpers import baf

from baf.log.postgres import redact_dsn

#: An agent file for the workers to load before they fail to open the log.
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "serve_agent.py"


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://alice:se/cret99@127.0.0.1:9/rt", "postgresql://alice:***@127.0.0.1:9/rt"),
        ("postgresql://alice:se?cret99@h/rt", "postgresql://alice:***@h/rt"),
        ("postgresql://alice:se#cret@99@h/rt?password=zz", "postgresql://alice:***@h/rt?password=***"),
        ("postgresql://u:pw@h/db?application_name=x@y", "postgresql://u:***@h/db?application_name=x@y"),
        ("postgresql://h/db?application_name=a@b", "postgresql://h/db?application_name=a@b"),
    ],
)
def test_redact_dsn_hides_a_password_that_was_not_percent_encoded(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown


@pytest.mark.parametrize("separator", ["/", "?", "#"])
def test_the_commands_show_no_piece_of_a_password_that_was_not_percent_encoded(tmp_path: Path, separator: str) -> None:
    url = f"postgresql://alice:se{separator}cret99@127.0.0.1:9/rt"
    for args in (["sessions", url], ["serve", str(FIXTURE), "--log", url]):
        result = baf(*args, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "percent-encode '/', '?', '#' and '@' in the password" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and "alice:***@127.0.0.1:9/rt" in result.stderr
        shown = result.stderr.replace("alice:***@", "").replace("percent-encode", "")
        assert "'se'" not in shown and "cret99" not in shown, shown
