"""Public names resolve, and the names users rely on live where the design says."""

from __future__ import annotations

import importlib

import pytest

import baf

PACKAGES = [
    "baf",
    "baf.core",
    "baf.log",
    "baf.llm",
    "baf.reasoning",
    "baf.platforms",
    "baf.testing",
    "baf.errors",
    "baf.wording",
    "baf.declarative",
    "baf.library.intents",
]


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


def _all_modules() -> list[str]:
    import pkgutil

    return ["baf", *(m.name for m in pkgutil.walk_packages(baf.__path__, "baf."))]


@pytest.mark.parametrize("module_name", _all_modules())
def test_all_lists_exactly_the_public_names(module_name: str) -> None:
    """Both directions, as httpx checks its own: every name in ``__all__`` resolves (with a docstring if
    it is a function or class), and every public function or class a module defines is in ``__all__``."""
    import inspect

    module = importlib.import_module(module_name)
    listed = getattr(module, "__all__", None)
    defined = sorted(
        name for name, value in vars(module).items()
        if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == module_name
    )  # fmt: skip
    if listed is None:
        assert not defined, f"{module_name} defines {defined} but has no __all__"
        return
    for name in listed:
        value = getattr(module, name)  # AttributeError: listed but not there
        if inspect.isfunction(value) or inspect.isclass(value):
            assert value.__doc__, f"{module_name}.{name} has no docstring"
    assert not set(defined) - set(listed), f"{module_name}: public but not in __all__: {set(defined) - set(listed)}"
    assert len(set(listed)) == len(listed), f"{module_name}: __all__ repeats a name"


def test_missing_sessions_and_broken_invariants_have_their_own_errors() -> None:
    from baf import errors

    assert issubclass(errors.SessionNotFoundError, errors.BafError) and issubclass(errors.SessionNotFoundError,
                                                                                   LookupError)  # fmt: skip
    assert issubclass(errors.InvariantError, errors.BafError) and issubclass(errors.InvariantError, RuntimeError)
    assert str(errors.SessionNotFoundError("s9")) == "session 's9' has no records in this log"


def test_every_error_of_the_tree_is_raised_somewhere() -> None:
    """An error class nothing raises is a promise the code does not keep (users catch it in vain): each
    class of the tree is built somewhere in baf (``raise X(...)``, or made and raised a line later), or
    is the base of classes that are."""
    import ast
    from pathlib import Path

    from baf import errors

    built: set[str] = set()
    for path in Path(baf.__file__).parent.rglob("*.py"):
        if path.name == "errors.py" and path.parent.name == "baf":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                built.add(
                    func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                )
    classes = [getattr(errors, name) for name in errors.__all__]
    bases = {base.__name__ for cls in classes for base in cls.__mro__[1:]}
    never = [cls.__name__ for cls in classes if cls.__name__ not in built and cls.__name__ not in bases]
    assert never == []
