"""encode_json: orjson's speed, json's meaning (what is refused, what is read back)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import uuid
from collections import OrderedDict
from typing import Any

import pytest

from baf.log.jsontext import decode_json, encode_json, json_copy


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Tag(str):
    pass


@dataclasses.dataclass
class Point:
    x: int


SAME_AS_JSON: list[Any] = [
    {"text": "plain", "n": 1, "f": 1.5, "ok": True, "none": None, "list": [1, "two", {"three": 3.0}]},
    {"unicode": "grüße – 東京 🎉", "escapes": 'quote " backslash \\ newline \n tab \t nul \x00'},
    {"tuple": (1, 2), "nested": {"t": ("a", ("b",))}},
    {1: "integer key", False: "bool key", None: "none key", 2.5: "float key"},
    {"nan": math.nan, "inf": math.inf, "-inf": -math.inf},
    {"intenum": Level.HIGH, "strsub": Tag("x"), "ordered": OrderedDict(a=1)},
    {"big": 2**64 + 1, "neg": -(2**63) - 1, "edge": 2**63, "small": -(2**63)},
    {"floats": [0.1, -0.0, 1e300, 5e-324, 1e16, 123456789.123456789]},
    {"deep": [[[[[["x"]]]]]]},
]


@pytest.mark.parametrize("value", SAME_AS_JSON)
def test_reads_back_as_json_would(value: Any) -> None:
    expected = json.loads(json.dumps(value))
    got = json.loads(encode_json(value))
    # NaN != NaN: compare the text of both decodings instead.
    assert json.dumps(got) == json.dumps(expected)


def test_very_deep_nesting_falls_back_to_json() -> None:
    value: Any = "x"
    for _ in range(300):  # beyond orjson's recursion limit, within json's
        value = [value]
    assert json.loads(encode_json({"v": value})) == {"v": value}


@pytest.mark.parametrize(
    "value",
    [
        {"object": object()},
        {"enum": Color.RED},
        {"uuid": uuid.UUID(int=1)},
        {"dataclass": Point(1)},
        {"when": datetime.datetime(2020, 1, 1)},
        {"set": {1, 2}},
        {"bytes": b"x"},
    ],
)
def test_refuses_what_json_refuses(value: Any) -> None:
    with pytest.raises(TypeError):
        json.dumps(value)
    with pytest.raises(TypeError):
        encode_json(value)


def test_circular_reference_raises_value_error_like_json() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(ValueError):
        encode_json(loop)


@pytest.mark.parametrize("value", [*SAME_AS_JSON[:4], *SAME_AS_JSON[5:]])
def test_json_copy_is_a_json_round_trip(value: Any) -> None:
    expected = json.loads(json.dumps(value, allow_nan=False, ensure_ascii=False))
    copied = json_copy(value)
    assert copied == expected
    assert json.dumps(copied) == json.dumps(expected)  # same types too (lists for tuples, str keys)


def test_json_copy_is_deep() -> None:
    value = {"list": [{"a": 1}]}
    copied = json_copy(value)
    copied["list"][0]["a"] = 2
    assert value == {"list": [{"a": 1}]}


@pytest.mark.parametrize("value", [{"nan": math.nan}, [math.inf], -math.inf, {"enum": Color.RED}, {"o": object()}])
def test_json_copy_refuses_what_json_refuses(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        json.loads(json.dumps(value, allow_nan=False))
    with pytest.raises((TypeError, ValueError)):
        json_copy(value)


def test_output_is_compact_and_not_ascii_escaped_on_both_paths() -> None:
    assert encode_json({"text": "é", "n": [1, 2]}) in (b'{"text":"\xc3\xa9","n":[1,2]}', '{"text":"é","n":[1,2]}')
    assert encode_json({1: "é"}) == '{"1":"é"}'  # an integer key: the json path, same layout


def test_decode_reads_what_only_json_reads() -> None:
    assert math.isnan(decode_json(encode_json({"x": math.nan}))["x"])
    assert decode_json(b'{"y": Infinity}') == {"y": math.inf}


@pytest.mark.parametrize("text", ['{"broken', "", "{'single': 1}"])
def test_decode_refuses_text_that_is_not_json(text: str) -> None:
    with pytest.raises(ValueError):
        decode_json(text)
