"""Records to ``baf_records`` rows and back, with every check a row gets on the way.

Writing, ``encode_record`` validates a record (types SQLite must store as the schema says, JSON data,
valid Unicode) and computes its checksum (``baf.log.checksum``), in ``append``, before the batch is
queued: a record SQLite would refuse fails its own call, not the group it would have been committed with.

Reading, ``row_decoder`` decodes rows strictly: a column of the wrong type, bad JSON, data that is not
an object, a checksum that does not match, or a seq that skips one (a record missing from the middle of
the session) raises ``CorruptRecordError`` naming the session and seq; records then pass through
``baf.log.upcast``. A row without a checksum (written before schema version 4, or by a tool inserting
rows itself) is read without that check.

Fast path: the common row (exact column types, JSON orjson reads as an object, the current version) is
decoded inline, without a ``Record`` or the upcaster, and the cyclic garbage collector is paused while
a batch is decoded; any other row goes through ``_decode``, which has the last word on what is corrupt.
Decoding is most of the cost of reading a log (``bench/bench_replay.py`` reads and folds a
1,000,000-record log).
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, TypeVar

import orjson

from baf.errors import CorruptRecordError
from baf.log import upcast as upcast_module
from baf.log.checksum import record_checksum
from baf.log.jsontext import check_unicode
from baf.log.record import MAX_TS, MIN_TS, Record
from baf.log.row_codec import MAX_INT64, encode_fields
from baf.log.store import missing_record

__all__ = ["SELECT_COLUMNS", "Row", "collector_paused", "encode_record", "encode_records", "row_decoder"]

#: One encoded row of ``baf_records``: (session_id, seq, ts, kind, version, data as JSON text, checksum).
Row = tuple[str, int, float, str, int, str, int]

#: The columns ``row_decoder`` decodes, in its order.
SELECT_COLUMNS: Final = "seq, ts, kind, version, data, checksum"

_T = TypeVar("_T")


def encode_record(record: Record) -> Row:
    """Encode ``record`` as a ``baf_records`` row, or raise ``TypeError``/``ValueError`` (the checks of
    ``baf.log.row_codec``, with a 64-bit ``version``)."""
    session_id, seq, kind, version, ts, text, encoded = encode_fields(record, MAX_INT64)
    return (session_id, seq, ts, kind, version, text, record_checksum(session_id, seq, ts, kind, version, encoded))


def encode_records(records: Iterable[Record]) -> tuple[list[Row], int]:
    """``encode_record`` of each record, and the characters of JSON the rows hold in all (one loop for an
    append's batch, instead of a call per record and a second pass for the size)."""
    rows: list[Row] = []
    size = 0
    for record in records:
        row = encode_record(record)
        rows.append(row)
        size += len(row[5])
    return rows, size


def row_decoder(
    session_id: str,
    after_seq: int,
    registry: upcast_module.Upcasters,
    make: Callable[[int, float, str, dict[str, Any]], _T],
) -> Callable[[object, Any], _T]:
    """``decode(cursor, row)``: a row of ``SELECT_COLUMNS`` decoded, checked, upcast and passed to
    ``make(seq, ts, kind, data)``. Rows must come in seq order, starting right after ``after_seq``.

    Raises ``CorruptRecordError`` for a bad row or a missing seq. It has a sqlite3 ``row_factory``'s
    signature (the cursor is ignored), so a fetch can decode as it goes.
    """
    current = registry.current_version
    loads = orjson.loads
    expected = after_seq + 1

    def decode(cursor: object, row: Any) -> _T:
        nonlocal expected
        seq, ts, kind, version, text, checksum = row
        if seq != expected:
            _missing(session_id, expected, seq)
        expected += 1
        if (
            type(text) is str
            and type(seq) is int
            and type(ts) is float
            and MIN_TS <= ts <= MAX_TS
            and type(kind) is str
            and type(version) is int
            and version == current
        ):
            if checksum is not None and checksum != record_checksum(session_id, seq, ts, kind, version, text):
                _changed(session_id, seq)
            try:
                data = loads(text)
            except ValueError:
                data = None  # JSON that only the standard parser reads, or none at all: _decode decides
            if type(data) is dict:
                return make(seq, ts, kind, data)
        record = registry.upcast(_decode(session_id, row))
        return make(record.seq, record.ts, record.kind, record.data)

    return decode


def _missing(session_id: str, expected: int, found: object) -> None:
    if type(found) is not int:
        raise CorruptRecordError(session_id, expected, f"seq is {_sql_type(found)}, not an integer")
    raise missing_record(session_id, expected, found)


def _changed(session_id: str, seq: int) -> None:
    raise CorruptRecordError(
        session_id, seq, "its checksum does not match: the record changed after it was written (damage or an edit)"
    )


def _decode(session_id: str, row: Any) -> Record:
    """Turn a row into a Record, or raise ``CorruptRecordError``."""
    seq, ts, kind, version, text, checksum = row
    if type(seq) is not int:
        raise CorruptRecordError(session_id, seq, f"seq is {_sql_type(seq)}, not an integer")
    if type(ts) is int:
        ts = float(ts)
    if type(ts) is not float:
        raise CorruptRecordError(session_id, seq, f"ts is {_sql_type(ts)}, not a number")
    if not MIN_TS <= ts <= MAX_TS:
        raise CorruptRecordError(session_id, seq, f"ts {ts!r} is not a time (years 1 to 9999)")
    if type(kind) is not str:
        raise CorruptRecordError(session_id, seq, f"kind is {_sql_type(kind)}, not text")
    if type(version) is not int:
        raise CorruptRecordError(session_id, seq, f"version is {_sql_type(version)}, not an integer")
    if type(text) is not str:
        raise CorruptRecordError(session_id, seq, f"data is {_sql_type(text)}, not JSON text")
    if checksum is not None:
        if type(checksum) is not int:
            raise CorruptRecordError(session_id, seq, f"checksum is {_sql_type(checksum)}, not an integer")
        if checksum != record_checksum(session_id, seq, ts, kind, version, text):
            _changed(session_id, seq)
    try:
        data = orjson.loads(text)
    except ValueError:
        # orjson refuses what json accepts and the encoder may write (NaN, Infinity, very deep
        # nesting): the standard parser has the last word.
        try:
            data = json.loads(text)
            check_unicode(text, data)
        except (ValueError, RecursionError) as exc:
            raise CorruptRecordError(session_id, seq, f"data is not valid JSON: {exc}") from exc
    if type(data) is not dict:
        kind_of_json = _JSON_TYPES.get(type(data), type(data).__name__)
        raise CorruptRecordError(session_id, seq, f"data is {kind_of_json}, not a JSON object")
    return Record(session_id=session_id, seq=seq, kind=kind, data=data, ts=ts, version=version)


_SQL_TYPES: Final[dict[type, str]] = {
    type(None): "NULL",
    int: "an integer",
    float: "a real",
    str: "text",
    bytes: "a blob",
}
_JSON_TYPES: Final[dict[type, str]] = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _sql_type(value: object) -> str:
    """How SQLite stored ``value``, for error messages."""
    return _SQL_TYPES.get(type(value), type(value).__name__)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector from running while a batch of rows is decoded.

    Decoding allocates a few objects per row and nothing cyclic; on a long session the collector's
    passes over them (each young object is traversed again as it ages) cost more than the decoding.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
