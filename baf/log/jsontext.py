"""JSON encoding with the standard library's meaning at orjson's speed, for the write path.

The stores promise what ``json`` promises: data ``json.dumps`` refuses is refused, and what is read back
is ``json.loads(json.dumps(data))``. ``json.dumps`` costs ~5-8 µs for a small record, a measurable share
of a reasoning turn; orjson takes well under 1 µs but differs at the edges (it writes NaN as ``null``,
encodes ``Enum`` and ``UUID`` values, refuses integer keys and subclasses of builtins, writes tuples as
lists). :func:`encode_json` uses orjson and falls back to ``json`` whenever the two could differ.

Fast path: orjson's output is kept only when it decodes to a value equal to the input, and decoding and
comparing cost twice as much as the encoding. A value made only of ``dict``, ``list``, ``str``, ``int``,
``bool``, ``None`` and finite ``float`` (exact types) always decodes equal, and checking that by walking it
costs a third less (``bench/ab_instructions.py``); anything else still gets the decode and comparison.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import orjson

__all__ = ["LoneSurrogateError", "check_unicode", "decode_json", "encode_json", "json_copy"]

# Subclasses of builtins, dataclasses and datetimes go to ``default``; there is none, so orjson raises
# and ``json`` decides (it encodes str/int/dict/list subclasses and refuses the rest).
_OPTIONS = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_MISSING: Any = object()
# The fallback writes what json.dumps means, compactly and without escaping non-ASCII text, as orjson does.
_json_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def encode_json(value: Any) -> bytes | str:
    """``value`` as JSON text (UTF-8 bytes, or ``str`` from the fallback); raises what ``json.dumps`` raises.

    ``json.loads`` of the result equals ``json.loads(json.dumps(value))``. The orjson output is kept
    only if it decodes to a value equal to ``value``: that rules out every case where orjson and
    ``json`` disagree (NaN and infinities, ``Enum``/``UUID`` members, tuples, integer keys), which then
    take the ``json`` path.
    """
    try:
        encoded = orjson.dumps(value, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: unsupported type, integer keys, too deep, ...
        return _json_encode(value)
    if not (type(value) is dict and _plain(value.values())) and orjson.loads(encoded) != value:
        return _json_encode(value)
    return encoded


def _plain(values: Iterable[Any]) -> bool:
    """Whether ``values`` hold only JSON's own types (exact ``dict``, ``list``, ``str``, ``int``, ``bool``,
    ``None``, finite ``float``), at any depth: a value orjson encoded that is made of these decodes back
    equal (dict keys are ``str``: orjson refuses any other). False means it may not; call only after
    orjson encoded it (so it has no cycles, nor more depth than orjson's limit)."""
    for value in values:
        kind = type(value)
        if kind is str or kind is int or kind is bool or value is None:
            continue
        if kind is dict:
            if not _plain(value.values()):
                return False
        elif kind is list:
            if not _plain(value):
                return False
        elif kind is not float or value - value:  # NaN - NaN and inf - inf are NaN: true
            return False
    return True


def decode_json(text: str | bytes) -> Any:
    """Parse what :func:`encode_json` wrote: orjson, or ``json`` for what only it reads (``NaN`` and
    ``Infinity`` tokens, nesting deeper than orjson's limit). Raises ``ValueError`` (``RecursionError``
    for absurd nesting) if the text is not JSON, or if its escapes spell a lone surrogate (see
    :func:`check_unicode`)."""
    try:
        return orjson.loads(text)
    except ValueError:
        value = json.loads(text)
        check_unicode(text, value)
        return value


class LoneSurrogateError(ValueError):
    """JSON text whose escapes spell a lone surrogate (``\\ud800``): valid JSON, but not Unicode text."""


# A \uD800-\uDFFF escape: the only way JSON text that is itself valid Unicode can spell a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def check_unicode(text: str | bytes, value: Any) -> None:
    """Raise :class:`LoneSurrogateError` if ``value``, parsed by ``json`` from ``text``, holds a lone surrogate.

    orjson refuses one; ``json`` reads it, and no store can write it back, nor a terminal or a file show
    it: text read back with one is not what any baf writer wrote (which refuses it), so it is damage.
    Costs nothing unless ``text`` has a surrogate escape; the walk is iterative (the ``json`` path is
    also the one for nesting too deep for orjson)."""
    if not _SURROGATE_ESCAPE.search(text if isinstance(text, str) else text.decode("utf-8", "replace")):
        return
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise LoneSurrogateError(f"text holds a lone surrogate, which is not Unicode: {item[:60]!r}") from None


def json_copy(value: Any) -> Any:
    """``json.loads(json.dumps(value, allow_nan=False))``: a deep copy made of JSON types only, or the
    ``TypeError``/``ValueError`` that call raises. NaN and infinities are refused."""
    try:
        copied = orjson.loads(orjson.dumps(value, option=_OPTIONS))
    except TypeError:
        copied = _MISSING
    # Equal means orjson read it as json would (see encode_json); NaN never compares equal, so it
    # always takes the json path, which refuses it.
    if copied is _MISSING or copied != value:
        copied = json.loads(json.dumps(value, allow_nan=False, ensure_ascii=False))
    return copied
