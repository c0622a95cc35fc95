"""encode_json: orjson's speed, json's meaning (what is refused, what is read back)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import random
import struct
import uuid
from collections import OrderedDict
from typing import Any

import orjson
import pytest

from baf.log.jsontext import _OPTIONS, _json_encode, decode_json, encode_json, json_copy


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Tag(str):
    pass


class Half(float):
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


def _reference_encoding(value: Any) -> bytes | str:
    """What encode_json wrote before its fast path: orjson's output when it decodes back equal, else json's."""
    try:
        encoded = orjson.dumps(value, option=_OPTIONS)
    except TypeError:
        return _json_encode(value)
    return encoded if orjson.loads(encoded) == value else _json_encode(value)


# Each is a JSON value except for one thing somewhere inside it: the walk must not take any for plain.
NOT_PLAIN: list[Any] = [
    {"deep": {"list": [1, "x", (2,)]}},
    {"deep": [{"f": math.nan}]},
    {"deep": [{"f": -math.inf}]},
    {"deep": [[math.inf]]},
    {"level": [Level.HIGH]},  # an IntEnum: orjson and json agree, it reads back equal (orjson's output kept)
    {"color": {"c": Color.RED}},
    {"uuid": [uuid.UUID(int=7)]},
    {"fragment": [orjson.Fragment(b"[1]")]},
    {"floatsub": [Half(0.5)]},
    {"tag": {"t": Tag("x")}},
    {"ordered": [OrderedDict(a=1)]},
]


@pytest.mark.parametrize("value", [*SAME_AS_JSON, *NOT_PLAIN])
def test_writes_what_the_decode_check_decides(value: Any) -> None:
    """The fast path (a walk over exact JSON types) chooses orjson's or json's text exactly as decoding and
    comparing does: the same bytes as before, for any value."""
    try:
        expected: Any = _reference_encoding(value)
    except (TypeError, ValueError) as exc:
        expected = type(exc)
    try:
        got: Any = encode_json(value)
    except (TypeError, ValueError) as exc:
        got = type(exc)
    assert got == expected
    assert type(got) is type(expected)


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    leaves: list[Any] = ["text", "é", "", 0, -1, 2**63, 2**64, 1.5, -0.0, 1e16, True, False, None,
                         math.nan, math.inf, (1,), (), Level.HIGH, Color.RED, Tag("t"), Half(1.0)]  # fmt: skip
    roll = rng.random()
    if depth < 4 and roll < 0.3:
        return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(4))}
    if depth < 4 and roll < 0.5:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if rng.random() < 0.85:  # mostly plain leaves, so whole values are often plain
        return rng.choice(leaves[:13])
    return rng.choice(leaves)


def test_random_values_get_the_same_text_as_the_decode_check_chooses() -> None:
    rng = random.Random(13)
    plain = 0
    for _ in range(3000):
        value = {"v": _random_value(rng)}
        try:
            expected: Any = _reference_encoding(value)
        except (TypeError, ValueError) as exc:
            expected = type(exc)
        try:
            got: Any = encode_json(value)
        except (TypeError, ValueError) as exc:
            got = type(exc)
        assert got == expected, value
        assert type(got) is type(expected), value
        plain += isinstance(got, bytes)
    assert plain > 1000  # the fast path was taken often


def test_finite_floats_read_back_exactly_from_orjson() -> None:
    """What the walk relies on for floats: orjson's text of any finite float decodes to that very float."""
    rng = random.Random(7)
    values = [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(20000)]
    values += [5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.1, 1 / 3, 1e23, 9007199254740993.0]
    finite = [value for value in values if math.isfinite(value)]
    assert orjson.loads(orjson.dumps(finite)) == finite
