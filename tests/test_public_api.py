"""Public names resolve, and the names users rely on live where the design says."""

from __future__ import annotations

import importlib

import pytest

import baf

PACKAGES = ["baf", "baf.core", "baf.log", "baf.llm", "baf.reasoning", "baf.platforms", "baf.testing", "baf.errors",
            "baf.declarative", "baf.library.intents"]


@pytest.mark.parametrize("module_name", PACKAGES)
def test_all_names_resolve_and_have_docstrings(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert module.__all__, module_name
    for name in module.__all__:
        value = getattr(module, name)
        if callable(value) and not name.startswith("__"):
            assert value.__doc__, f"{module_name}.{name} has no docstring"


def test_documented_locations() -> None:
    from baf.core.agent import Agent
    from baf.core.session import Session
    from baf.core.state import State
    from baf.library.state import reasoning_state_library as rsl
    from baf.reasoning.skill import Skill
    from baf.reasoning.tool import Tool
    from baf.reasoning.workspace import Workspace

    assert baf.Agent is Agent and baf.Session is Session and baf.State is State
    for name in ("reasoning_body", "new_reasoning_state", "ReasoningStep", "ReasoningStepKind", "Task", "TaskList"):
        assert hasattr(rsl, name), name
    assert all(isinstance(cls, type) for cls in (Tool, Skill, Workspace))


def test_error_tree_is_drawn_with_every_error() -> None:
    from baf import errors

    for name in errors.__all__:
        assert name in (errors.__doc__ or ""), f"{name} missing from the drawing"
        assert issubclass(getattr(errors, name), errors.BafError)
