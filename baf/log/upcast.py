"""Schema evolution: read records written by an older baf as the current version.

A record's ``data`` shape is fixed by its ``(kind, version)``. When a kind's shape changes, baf bumps
``CURRENT_VERSION`` in ``baf.log.record`` and registers an *upcaster* that lifts data one version up::

    @register_upcaster(RecordKind.REPLY, from_version=1)
    def _reply_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
        data["parts"] = [data.pop("text")]
        return data

Records are never rewritten on disk; every store's ``read`` passes each record through ``upcast``,
which applies the chain ``version -> version + 1 -> ... -> CURRENT_VERSION``.

Rules:

- A kind with **no upcaster for a step is unchanged by that step**: a version bump for one kind does
  not force a no-op upcaster on every other kind. The version is still lifted.
- A record with a version **newer** than ``CURRENT_VERSION`` raises ``UnknownRecordVersionError``:
  guessing at a future shape would be silent repair.
- A version below 1 is not a version baf ever wrote: ``CorruptRecordError``.
- An upcaster receives a private deep copy of the data, so it may mutate it in place. If it raises or
  returns something other than a dict, the record cannot be read: ``CorruptRecordError`` (the original
  exception is ``__cause__``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

from baf.errors import CorruptRecordError, UnknownRecordVersionError
from baf.log.record import CURRENT_VERSION, Record

__all__ = ["UPCASTERS", "Upcaster", "Upcasters", "register_upcaster", "upcast"]

#: Lifts the ``data`` of one kind from one version to the next.
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class Upcasters:
    """A registry of upcasters and the version they lift records to.

    baf uses the module-level ``UPCASTERS``; a separate instance is useful in tests, e.g. to pretend
    ``current_version`` is higher than the one this baf writes.
    """

    def __init__(self, current_version: int = CURRENT_VERSION) -> None:
        if current_version < 1:
            raise ValueError(f"current_version must be >= 1, got {current_version}")
        self.current_version = current_version
        self._steps: dict[tuple[str, int], Upcaster] = {}

    def register(self, kind: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Decorator: ``fn(data) -> data`` lifts ``kind`` from ``from_version`` to ``from_version + 1``.

        Registering two upcasters for the same step is an error: which one wins would depend on
        import order.
        """
        if from_version < 1:
            raise ValueError(f"from_version must be >= 1, got {from_version}")

        def decorator(fn: Upcaster) -> Upcaster:
            key = (kind, from_version)
            if key in self._steps:
                raise ValueError(
                    f"an upcaster for kind {kind!r} from version {from_version} is already registered: "
                    f"{self._steps[key]!r}"
                )
            self._steps[key] = fn
            return fn

        return decorator

    def upcast(self, record: Record) -> Record:
        """Return ``record`` lifted to ``current_version`` (the same object if it already is)."""
        version = record.version
        if version == self.current_version:
            return record
        if version > self.current_version:
            raise UnknownRecordVersionError(record.session_id, record.seq, record.kind, version, self.current_version)
        if version < 1:
            raise CorruptRecordError(record.session_id, record.seq, f"version {version} is not >= 1")
        # A deep copy, so an upcaster that mutates in place cannot change a record held by a store.
        data = copy.deepcopy(record.data)
        for step in range(version, self.current_version):
            fn = self._steps.get((record.kind, step))
            if fn is None:
                continue  # this kind's data did not change in this step
            try:
                data = fn(data)
            except Exception as exc:
                raise CorruptRecordError(
                    record.session_id,
                    record.seq,
                    f"upcaster {fn.__qualname__} for {record.kind!r} v{step}->v{step + 1} failed: {exc!r}",
                ) from exc
            if not isinstance(data, dict):
                raise CorruptRecordError(
                    record.session_id,
                    record.seq,
                    f"upcaster {fn.__qualname__} for {record.kind!r} v{step}->v{step + 1} "
                    f"returned {type(data).__name__}, not dict",
                )
        return dataclasses.replace(record, data=data, version=self.current_version)


#: The registry every store reads through.
UPCASTERS = Upcasters()


def register_upcaster(kind: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register ``fn(data) -> data`` lifting ``kind`` from ``from_version`` to ``from_version + 1``."""
    return UPCASTERS.register(kind, from_version)


def upcast(record: Record) -> Record:
    """Lift ``record`` to the current version with the registered upcasters (see the module docstring)."""
    # Looked up at call time so a test can swap ``UPCASTERS`` for its own registry.
    return UPCASTERS.upcast(record)


# -- version 1 -> 2: one record shape for model turns -----------------------------------------------
# Before version 2 the reasoning state and the pattern catalogue recorded model turns in two shapes.
# The reasoning state's llm_request held only what changed since the previous request of its
# invocation, numbered by ``step`` (0 starts an invocation); a pattern's held the whole request, with
# ``pattern`` and ``call`` (counted from 1 per pattern run) instead. Version 2 names the loop and its
# run and counts turns the same way for both (see ``baf.reasoning.turn``). Pattern tool results had no
# ``original_size``.


def _model_turn_v1(data: dict[str, Any]) -> dict[str, Any]:
    if "pattern" in data:
        data["loop"] = str(data.pop("pattern"))
        data["turn"] = int(data.pop("call")) - 1
        data.setdefault("step", data["turn"])  # a version-1 pattern record did not say; its call stands in
    else:
        data["loop"] = "reasoning"
        data["turn"] = int(data["step"])
        if data["step"] > 0:  # later turns of an invocation held only what changed
            data["extends"] = True
    data["run"] = 0
    return data


def _llm_response_v1(data: dict[str, Any]) -> dict[str, Any]:
    data = _model_turn_v1(data)
    data.pop("extends", None)
    return data


def _tool_result_v1(data: dict[str, Any]) -> dict[str, Any]:
    data.setdefault("original_size", len(str(data.get("content", ""))))
    return data


UPCASTERS.register("llm_request", from_version=1)(_model_turn_v1)
UPCASTERS.register("llm_response", from_version=1)(_llm_response_v1)
UPCASTERS.register("tool_result", from_version=1)(_tool_result_v1)
