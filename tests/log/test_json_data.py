"""The JSON codec every store uses for record data: fast, standard JSON, and never looser than json."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from typing import Any

import pytest

from baf.log.json_data import dump_data, load_data


@pytest.mark.parametrize(
    "data",
    [
        {"text": "é😀", "n": [1, 2.5, None, True], "nested": {"a": {"b": []}}},
        {"big": 2**70, "negative": -(2**65)},  # beyond orjson's 64 bits: the standard library writes them
        {"deep": json.loads("[" * 300 + "]" * 300)},  # beyond orjson's nesting limit
    ],
)
def test_data_round_trips(data: dict[str, Any]) -> None:
    text = dump_data(data)
    assert isinstance(text, str)
    assert load_data(text) == data
    assert json.loads(text) == data  # standard JSON, readable by any tool


def test_output_is_compact_and_not_ascii_escaped() -> None:
    assert dump_data({"text": "é", "n": [1, 2]}) == '{"text":"é","n":[1,2]}'


def test_keys_that_are_not_strings_become_strings_as_with_json() -> None:
    data = {1: "a", 2.5: "b", None: "c", False: "d"}
    assert (
        load_data(dump_data(data)) == json.loads(json.dumps(data)) == {"1": "a", "2.5": "b", "null": "c", "false": "d"}
    )


def test_non_finite_floats_are_written_as_null() -> None:
    text = dump_data({"latency": math.nan, "limit": math.inf, "low": -math.inf})
    assert json.loads(text) == {"latency": None, "limit": None, "low": None}


def test_older_nan_tokens_still_read() -> None:
    value = load_data('{"x": NaN, "y": Infinity}')
    assert math.isnan(value["x"]) and value["y"] == math.inf


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (datetime.datetime(2026, 1, 1), TypeError),  # json refuses it: so do we, no silent ISO text
        (Point(1), TypeError),
        ({1, 2}, TypeError),
        (object(), TypeError),
    ],
)
def test_what_json_refuses_is_refused(value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        dump_data({"value": value})


def test_a_circular_reference_is_refused() -> None:
    data: dict[str, Any] = {}
    data["self"] = data
    with pytest.raises(ValueError, match=r"[Cc]ircular"):
        dump_data(data)


def test_text_that_is_not_json_is_refused() -> None:
    for text in ('{"broken', "", "{'single': 1}"):
        with pytest.raises(ValueError):
            load_data(text)
