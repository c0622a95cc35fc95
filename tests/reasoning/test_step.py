"""ReasoningStep: a frozen value, however it is built (``ReasoningStep(...)`` or the loops' ``build_step``)."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from baf.reasoning.step import ReasoningStep, build_step


def test_build_step_makes_the_same_step_as_the_constructor() -> None:
    details = {"call_id": "c1", "result": "ok"}
    built = build_step("tool_result", 3, "lookup returned", details)
    made = ReasoningStep("tool_result", 3, "lookup returned", details)
    assert type(built) is ReasoningStep
    assert built == made and made == built and repr(built) == repr(made)
    assert built.details is details and built.to_dict() == made.to_dict()
    assert built != build_step("tool_result", 4, "lookup returned", details)


def test_a_built_step_is_frozen_picklable_and_replaceable() -> None:
    built = build_step("llm_text", 1, "hi", {"text": "hi", "final": True})
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.step = 2  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(built)) == built
    assert dataclasses.replace(built, step=2) == ReasoningStep("llm_text", 2, "hi", {"text": "hi", "final": True})


def test_build_step_sets_every_field() -> None:
    """A field added to ReasoningStep must be added to build_step too, or built steps would lack it."""
    fields = [field.name for field in dataclasses.fields(ReasoningStep)]
    assert list(inspect.signature(build_step).parameters) == fields
