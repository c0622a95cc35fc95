"""The row checks SQLite and PostgreSQL share (baf.log.row_codec): one function, the stores' bounds passed in."""

from __future__ import annotations

import pytest

from baf.log.postgres import encode_row
from baf.log.record import Record
from baf.log.sqlite_codec import encode_record


class Name(str):
    pass


class Number(int):
    pass


def test_each_store_applies_its_own_bounds() -> None:
    wide = Record("s", 1, "k", {}, version=2**31)
    assert encode_record(wide)[4] == 2**31  # SQLite: a 64-bit version column
    with pytest.raises(ValueError, match="version 2147483648 is too large"):
        encode_row(wide)  # PostgreSQL: int
    for nul in (Record("s\x00", 1, "k", {}), Record("s", 1, "k\x00", {})):
        assert encode_record(nul)[0] == nul.session_id  # SQLite's text holds NUL
        with pytest.raises(ValueError, match="contains a NUL character"):
            encode_row(nul)  # PostgreSQL's text cannot
    with pytest.raises(ValueError, match=r"seq \d+ is too large"):
        encode_record(Record("s", 2**63, "k", {}))
    # The lower bounds too: a version neither column holds is refused here, for its append alone.
    assert encode_record(Record("s", 1, "k", {}, version=-(2**63)))[4] == -(2**63)
    assert encode_row(Record("s", 1, "k", {}, version=-(2**31)))[5] == -(2**31)
    with pytest.raises(ValueError, match="version -2147483649 is too small"):
        encode_row(Record("s", 1, "k", {}, version=-(2**31) - 1))
    with pytest.raises(ValueError, match=r"version -\d+ is too small \(at least -9223372036854775808\)"):
        encode_record(Record("s", 1, "k", {}, version=-(2**63) - 1))


def test_both_stores_refuse_the_same_bad_fields() -> None:
    bad = [
        (Record(42, 1, "k", {}), TypeError, "session_id must be str"),  # type: ignore[arg-type]
        (Record("s", True, "k", {}), TypeError, "seq must be int"),
        (Record("s", 1, "k", {}, ts=float("inf")), TypeError, "ts must be a finite number"),
        (Record("s", 1, "k", {"x": object()}), TypeError, "data is not JSON"),
        (Record("s", 1, "k", {"text": "lone \ud800"}), ValueError, "data is not valid Unicode"),
        (Record("s", 1, "k", ["a"]), TypeError, "data must be a dict"),  # type: ignore[arg-type]
    ]
    for record, error, message in bad:
        for encode in (encode_record, encode_row):
            with pytest.raises(error, match=message):
                encode(record)


def test_subclasses_are_stored_as_their_base_types() -> None:
    record = Record(Name("s"), Number(3), Name("k"), {"a": 1}, ts=Number(5), version=Number(2))  # type: ignore[arg-type]
    session_id, seq, kind, text, ts, version = encode_row(record)
    assert [type(value) for value in (session_id, seq, kind, text, ts, version)] == [str, int, str, str, float, int]
    assert (session_id, seq, kind, text, ts, version) == ("s", 3, "k", '{"a":1}', 5.0, 2)
    assert encode_record(record)[:6] == ("s", 3, 5.0, "k", 2, '{"a":1}')
