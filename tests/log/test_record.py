"""Record: a frozen value, however it is built (``Record(...)`` or the stores' ``build_record``)."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from baf.log.record import Record, build_record


def test_build_record_makes_the_same_record_as_the_constructor() -> None:
    built = build_record("s", 3, "reply", {"text": "hi"}, 12.5, 1)
    made = Record("s", 3, "reply", {"text": "hi"}, ts=12.5, version=1)
    assert type(built) is Record
    assert built == made and made == built
    assert repr(built) == repr(made)
    assert built != build_record("s", 4, "reply", {"text": "hi"}, 12.5, 1)


def test_a_built_record_is_frozen_picklable_and_replaceable() -> None:
    built = build_record("s", 3, "reply", {"text": "hi"}, 12.5, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.seq = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del built.kind  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(built)) == built
    assert dataclasses.replace(built, seq=4) == Record("s", 4, "reply", {"text": "hi"}, ts=12.5, version=1)


def test_build_record_sets_every_field() -> None:
    """A field added to Record must be added to build_record too, or built records would lack it."""
    fields = [field.name for field in dataclasses.fields(Record)]
    assert list(inspect.signature(build_record).parameters) == fields
