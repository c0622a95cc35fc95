"""The CLI as a newcomer meets it: JSON where asked, why --grep matched, a wrong --kind refused, a
default log, and a layout that fits an 80-column terminal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from baf_test_helpers import baf
from rich.cells import cell_len

from .helpers import GOLDEN_SESSION, copy_golden


def test_at_with_json_prints_the_snapshot_as_json(tmp_path: Path) -> None:
    copy_golden(tmp_path)
    done = baf("replay", "golden.db", GOLDEN_SESSION, "--at", "4", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    snapshot = json.loads(done.stdout)
    assert snapshot["seq"] == 4 and snapshot["state"] == "welcome" and snapshot["variables"] == {"visits": 1}
    assert snapshot["conversation"][-1] == {"seq": 4, "role": "assistant", "text": "Welcome! Ask me about numbers."}


def test_grep_says_why_an_entry_matches(tmp_path: Path) -> None:
    copy_golden(tmp_path)
    done = baf("replay", "golden.db", GOLDEN_SESSION, "--grep", "description", "--limit", "0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # An LLM call matches through its request (the tool schemas), which its line does not show.
    llm = next(i for i, line in enumerate(lines) if "◆ llm" in line)
    assert "description" not in lines[llm].lower()
    assert "↳ matches:" in lines[llm + 1] and "description" in lines[llm + 1]
    assert all("↳ matches:" not in line for line in lines if "description" in line.split("↳")[0])


def test_an_unknown_kind_is_refused_with_the_valid_ones(tmp_path: Path) -> None:
    copy_golden(tmp_path)
    done = baf("replay", "golden.db", GOLDEN_SESSION, "--kind", "bogus", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert "unknown --kind 'bogus'" in done.stderr and "tool_result" in done.stderr and "reply" in done.stderr
    for kind in ("tool_result", "tool_call"):  # a record kind and an entry kind are both fine
        assert baf("replay", "golden.db", GOLDEN_SESSION, "--kind", kind, cwd=tmp_path).returncode == 0


def test_sessions_and_log_without_arguments(tmp_path: Path) -> None:
    copy_golden(tmp_path)
    for command in (["sessions"], ["log"]):
        done = baf(*command, cwd=tmp_path)
        assert done.returncode == 2
        assert "no log given, and there is no baf.db in this folder" in done.stderr and "golden.db" in done.stderr
    shutil.copyfile(tmp_path / "golden.db", tmp_path / "baf.db")
    done = baf("sessions", cwd=tmp_path)
    assert done.returncode == 0 and GOLDEN_SESSION in done.stdout and "sessions in baf.db" in done.stdout
    done = baf("log", cwd=tmp_path)
    assert done.returncode == 2 and "which session? baf log baf.db SESSION" in done.stderr
    assert GOLDEN_SESSION in done.stderr
    done = baf("log", "baf.db", GOLDEN_SESSION, "--json", cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[0])["seq"] == 1


def test_eighty_columns(tmp_path: Path) -> None:
    copy_golden(tmp_path)
    done = baf("sessions", "golden.db", cwd=tmp_path, columns=80)
    assert done.returncode == 0
    row = next(line for line in done.stdout.splitlines() if GOLDEN_SESSION in line)
    # The id, the agent and the whole date on the one line.
    assert "golden" in row.replace(GOLDEN_SESSION, "") and any(c.isdigit() for c in row.split(GOLDEN_SESSION)[1])
    assert all(cell_len(line) <= 80 for line in done.stdout.splitlines())
    timeline = baf("replay", "golden.db", GOLDEN_SESSION, "--limit", "0", cwd=tmp_path, columns=80).stdout
    assert timeline.count("\n") > 20 and all(cell_len(line) <= 80 for line in timeline.splitlines())
    # Each entry is one line: every line starts an entry (or closes a reasoning group).
    assert all(line.lstrip().startswith(("#", "└")) for line in timeline.splitlines())


def test_a_transition_is_said_once(tmp_path: Path) -> None:
    copy_golden(tmp_path)
    timeline = baf("replay", "golden.db", GOLDEN_SESSION, "--kind", "transition", cwd=tmp_path).stdout
    assert "welcome → reasoning_state (on WildcardEvent)" in timeline
    assert "->" not in timeline
