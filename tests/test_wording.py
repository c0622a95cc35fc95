"""Counts are worded one way everywhere: the noun agrees with the number, zero takes the plural."""

from __future__ import annotations

import pytest

from baf.errors import AgentFileError
from baf.replay.rerun import RerunReport
from baf.serve.process import _death_notice
from baf.wording import agreeing, counted


@pytest.mark.parametrize(
    ("count", "shown"), [(1, "1 record"), (0, "0 records"), (2, "2 records"), (2500, "2,500 records")]
)
def test_a_counted_noun_is_singular_only_for_one(count: int, shown: str) -> None:
    assert counted(count, "record") == shown


def test_an_irregular_plural_is_given() -> None:
    assert [counted(n, "entry", "entries") for n in (1, 0, 2)] == ["1 entry", "0 entries", "2 entries"]


def test_a_verb_or_pronoun_agrees_with_the_count() -> None:
    assert [agreeing(n, "is", "are") for n in (1, 0, 2)] == ["is", "are", "are"]


def test_the_messages_that_count_use_it() -> None:
    assert "1 still running: it takes its sessions over" in _death_notice(7, 9, 1, 10)
    assert "2 still running: they take its sessions over" in _death_notice(7, 9, 2, 10)
    assert str(AgentFileError("a.yaml", [("a.yaml", 1, 1, "bad")])).startswith("a.yaml: 1 problem\n")
    assert str(AgentFileError("a.yaml", [])).startswith("a.yaml: 0 problems\n")
    report = RerunReport("s", None, records_compared=1, llm_responses_served=0, tool_results_served=2)
    assert str(report) == "session 's': identical (1 record compared; 0 LLM responses and 2 tool results served)"
