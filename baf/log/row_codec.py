"""The checks every database store makes of a record before it writes it as a row, and its data as JSON.

SQLite (``baf.log.sqlite_codec``) and PostgreSQL (``baf.log.postgres``) store the same fields and refuse the
same things: a field of the wrong type, a number the column cannot hold, data ``json.dumps`` refuses, text
that is not valid Unicode. They differ in two bounds, passed in: the ``version`` column (64 bits in SQLite,
32 in PostgreSQL) and whether text may hold NUL (PostgreSQL's ``text`` cannot).

Fast path: exact field types are the common case and cheap to test; anything else gets the careful checks,
which raise the precise error (subclasses of ``str``, ``int`` and ``float`` are accepted there).
"""

from __future__ import annotations

from typing import Final

from baf.log.jsontext import encode_json
from baf.log.record import MAX_TS, MIN_TS, Record, ts_problem

__all__ = ["MAX_INT32", "MAX_INT64", "Fields", "encode_fields"]

MAX_INT32: Final = 2**31 - 1
MAX_INT64: Final = 2**63 - 1


#: A record's fields once checked: session_id, seq, kind, version, ts (a float), data as JSON text, and the
#: encoder's output the text came from (orjson's UTF-8 bytes, or ``str`` from the ``json`` fallback).
Fields = tuple[str, int, str, int, float, str, bytes | str]


def encode_fields(record: Record, max_version: int, nul_free: bool = False) -> Fields:
    """Check ``record``'s fields and encode its data as JSON; raise ``TypeError`` or ``ValueError``.

    ``seq`` must fit in 64 bits, ``version`` in the column whose largest value is ``max_version`` (from
    ``-max_version - 1``); with ``nul_free`` no text (the session id, the kind, the JSON) may hold a NUL
    character.
    """
    session_id, seq, kind, version, ts, data = (
        record.session_id, record.seq, record.kind, record.version, record.ts, record.data,
    )  # fmt: skip
    if not (
        type(session_id) is str
        and type(kind) is str
        and type(seq) is int
        and type(version) is int
        and type(ts) is float
        and type(data) is dict
        and seq <= MAX_INT64
        and abs(version) <= max_version  # the slow path takes -max_version - 1 too
        and MIN_TS <= ts <= MAX_TS
    ):
        _check_fields(record, max_version)
        # Subclasses pass as their base types (a driver may not know an ``int`` subclass).
        session_id, seq, kind, version = str(session_id), int(seq), str(kind), int(version)
    try:
        encoded = encode_json(data)
    except (TypeError, ValueError) as exc:  # ValueError: a circular reference
        raise TypeError(f"{_where(record)}: data is not JSON: {exc}") from exc
    if isinstance(encoded, bytes):
        text = encoded.decode()  # orjson's output: valid UTF-8, control characters (NUL too) escaped
    else:
        text = encoded
        _check_text(record, "data", text, nul_free)
    if not (session_id.isascii() and kind.isascii()) or (nul_free and ("\x00" in session_id or "\x00" in kind)):
        _check_text(record, "session_id", session_id, nul_free)
        _check_text(record, "kind", kind, nul_free)
    return session_id, seq, kind, version, float(ts), text, encoded


def _where(record: Record) -> str:
    return f"session {record.session_id!r} seq {record.seq!r}"


def _check_fields(record: Record, max_version: int) -> None:
    """Raise the precise error for a field that cannot be stored; accept subclasses."""
    where = _where(record)
    if not isinstance(record.session_id, str):
        raise TypeError(f"{where}: session_id must be str, not {type(record.session_id).__name__}")
    if not isinstance(record.kind, str):
        raise TypeError(f"{where}: kind must be str, not {type(record.kind).__name__}")
    for name, value, limit in (("seq", record.seq, MAX_INT64), ("version", record.version, max_version)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{where}: {name} must be int, not {type(value).__name__}")
        if value > limit:
            raise ValueError(f"{where}: {name} {value} is too large (at most {limit})")
        if value < -limit - 1:  # seq < 1 is the stores' own check (check_appendable)
            raise ValueError(f"{where}: {name} {value} is too small (at least {-limit - 1})")
    problem = ts_problem(record.ts)
    if problem is not None:
        raise TypeError(f"{where}: {problem}")
    if not isinstance(record.data, dict):
        raise TypeError(f"{where}: data must be a dict, not {type(record.data).__name__}")


def _check_text(record: Record, name: str, text: str, nul_free: bool) -> None:
    if nul_free and "\x00" in text:  # PostgreSQL text cannot hold NUL; JSON escapes it inside strings
        raise ValueError(f"{_where(record)}: {name} contains a NUL character")
    # A lone surrogate survives json.dumps(ensure_ascii=False) but not encoding to UTF-8.
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{_where(record)}: {name} is not valid Unicode: {exc}") from exc
