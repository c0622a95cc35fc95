"""How a record's ``data`` becomes JSON text and back: one codec for every store.

orjson does the work (five to ten times faster than the standard library, and encoding is a real part
of every append). Where orjson refuses what the standard library accepts (integers beyond 64 bits,
nesting deeper than 254 levels; and on reading, the ``NaN``/``Infinity`` tokens older logs hold) the
standard library has the last word, so the two never disagree about what can be stored.

One deliberate difference from ``json.dumps``: a float that is NaN or infinite is written as ``null``.
JSON has no such values; writing them as bare ``NaN`` tokens would make the row unreadable to standard
JSON tools (``jq``, SQLite's own ``json_extract``, trace viewers fed by ``baf export``).
"""

from __future__ import annotations

import json
from typing import Any, Final

import orjson

__all__ = ["dump_data", "load_data"]

# Keys that are not strings are written as strings, as json.dumps does. Dataclasses and datetimes are
# refused, as json.dumps refuses them, rather than silently turned into objects or text.
_OPTIONS: Final = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_fallback_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def dump_data(data: Any) -> str:
    """``data`` as compact JSON text (UTF-8, not ASCII-escaped).

    Raises ``TypeError`` for values JSON cannot hold and ``ValueError`` for a circular reference.
    """
    try:
        return orjson.dumps(data, option=_OPTIONS).decode()
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        # The standard library decides (and explains) what orjson refused. It refuses non-finite
        # floats rather than write non-JSON tokens: only data orjson refused for another reason (a huge
        # integer, deep nesting) and that also holds NaN gets that far.
        return _fallback_encode(data)


def load_data(text: str | bytes) -> Any:
    """Parse JSON text written by :func:`dump_data` (or by an older baf, with ``NaN`` tokens).

    Raises ``ValueError`` (or ``RecursionError`` for absurd nesting) if it is not JSON.
    """
    try:
        return orjson.loads(text)
    except ValueError:
        return json.loads(text)
