"""Upcasters: reading records written by an older baf."""

from __future__ import annotations

from typing import Any

import pytest

from baf.errors import CorruptRecordError, UnknownRecordVersionError
from baf.log import upcast as upcast_module
from baf.log.record import CURRENT_VERSION, Record
from baf.log.upcast import Upcasters, register_upcaster, upcast


def test_current_records_pass_through_unchanged() -> None:
    record = Record("s", 1, "note", {"a": 1})
    assert Upcasters().upcast(record) is record
    assert upcast(record) is record


def test_the_chain_is_applied_in_order_and_missing_steps_leave_data_unchanged() -> None:
    registry = Upcasters(current_version=4)

    @registry.register("reply", from_version=1)
    def v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
        return {"parts": [data["text"]]}

    # No upcaster 2 -> 3 for "reply": its data did not change in that step.

    @registry.register("reply", from_version=3)
    def v3_to_v4(data: dict[str, Any]) -> dict[str, Any]:
        data["parts"].append("!")
        return data

    old = Record("s", 7, "reply", {"text": "hi"}, ts=5.0, version=1)
    lifted = registry.upcast(old)
    assert lifted == Record("s", 7, "reply", {"parts": ["hi", "!"]}, ts=5.0, version=4)
    assert old.data == {"text": "hi"}  # the stored record is not touched
    assert registry.upcast(Record("s", 8, "reply", {"parts": ["x"]}, version=3)).data == {"parts": ["x", "!"]}


def test_a_kind_without_upcasters_is_relabelled_only() -> None:
    registry = Upcasters(current_version=3)
    lifted = registry.upcast(Record("s", 9, "note", {"n": 1}, ts=1.0, version=1))
    assert lifted == Record("s", 9, "note", {"n": 1}, ts=1.0, version=3)


def test_a_newer_version_is_refused() -> None:
    with pytest.raises(UnknownRecordVersionError) as caught:
        upcast(Record("s", 3, "note", {}, version=CURRENT_VERSION + 1))
    error = caught.value
    assert (error.session_id, error.seq, error.kind) == ("s", 3, "note")
    assert (error.version, error.supported) == (CURRENT_VERSION + 1, CURRENT_VERSION)
    assert "upgrade baf" in str(error)


def test_a_version_below_one_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError) as caught:
        upcast(Record("s", 3, "note", {}, version=0))
    assert (caught.value.session_id, caught.value.seq) == ("s", 3)


def test_a_failing_upcaster_makes_the_record_unreadable() -> None:
    registry = Upcasters(current_version=2)

    @registry.register("reply", from_version=1)
    def needs_text(data: dict[str, Any]) -> dict[str, Any]:
        return {"parts": [data["text"]]}

    @registry.register("broken", from_version=1)
    def returns_a_list(data: dict[str, Any]) -> dict[str, Any]:
        return [data]  # type: ignore[return-value]

    with pytest.raises(CorruptRecordError, match="needs_text") as caught:
        registry.upcast(Record("s", 4, "reply", {"no_text": 1}, version=1))
    assert (caught.value.session_id, caught.value.seq) == ("s", 4)
    assert isinstance(caught.value.__cause__, KeyError)
    with pytest.raises(CorruptRecordError, match="returned list, not dict"):
        registry.upcast(Record("s", 5, "broken", {}, version=1))


def test_registration_mistakes_are_refused() -> None:
    registry = Upcasters(current_version=3)
    registry.register("reply", from_version=1)(lambda data: data)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("reply", from_version=1)(lambda data: data)
    with pytest.raises(ValueError, match="from_version"):
        registry.register("reply", from_version=0)
    with pytest.raises(ValueError, match="current_version"):
        Upcasters(current_version=0)


def test_register_upcaster_uses_the_default_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = Upcasters(current_version=CURRENT_VERSION + 1)
    monkeypatch.setattr(upcast_module, "UPCASTERS", registry)

    @register_upcaster("note", from_version=CURRENT_VERSION)
    def add_flag(data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "flag": True}

    lifted = upcast(Record("s", 1, "note", {"a": 1}))
    assert (lifted.data, lifted.version) == ({"a": 1, "flag": True}, CURRENT_VERSION + 1)
