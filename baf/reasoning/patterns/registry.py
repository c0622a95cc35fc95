"""Patterns by name: ``pattern_registry.create("react", max_steps=5)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from baf.errors import ConfigurationError, PatternNotFoundError

__all__ = ["PatternRegistry", "pattern_registry"]

#: Anything that builds a pattern from keyword options: a pattern class, or a function.
PatternFactory = Callable[..., Any]


class PatternRegistry:
    """A name → factory map. Registering a taken name fails unless ``replace=True``."""

    def __init__(self) -> None:
        self._factories: dict[str, PatternFactory] = {}

    def register(self, name: str, factory: PatternFactory, *, replace: bool = False) -> None:
        """Make ``factory`` available as ``name``."""
        if not name:
            raise ConfigurationError("a pattern needs a non-empty name")
        if name in self._factories and not replace:
            raise ConfigurationError(f"a pattern named {name!r} is already registered; pass replace=True")
        self._factories[name] = factory

    def get(self, name: str) -> PatternFactory:
        """The factory registered as ``name``."""
        try:
            return self._factories[name]
        except KeyError:
            known = ", ".join(sorted(self._factories)) or "none"
            raise PatternNotFoundError(f"no reasoning pattern named {name!r}; registered: {known}") from None

    def create(self, name: str, **options: Any) -> Any:
        """Build the pattern registered as ``name`` with ``options``."""
        return self.get(name)(**options)

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._factories)

    def __contains__(self, name: object) -> bool:
        return name in self._factories


#: The registry with baf's built-in patterns (filled in by ``baf.reasoning.patterns``).
pattern_registry = PatternRegistry()
