"""Prompt templates: each pattern names its prompts by slot; any slot can be overridden per pattern."""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

from baf.errors import ConfigurationError

__all__ = ["PromptTemplate", "resolve_prompts"]


class PromptTemplate:
    """A ``str.format`` template whose fields are known up front, so a typo fails at construction.

    >>> PromptTemplate("Solve: {problem}").render(problem="2+2")
    'Solve: 2+2'

    Literal braces are written doubled (``{{`` and ``}}``), as in ``str.format``.
    """

    def __init__(self, text: str, name: str = "prompt") -> None:
        self.text = text
        self.name = name
        try:
            self.fields = frozenset(f for _, f, _, _ in string.Formatter().parse(text) if f is not None)
        except ValueError as exc:
            raise ConfigurationError(f"prompt {name!r} is not a valid template: {exc}") from exc
        bad = sorted(f for f in self.fields if not f.isidentifier())
        if bad:
            raise ConfigurationError(f"prompt {name!r} has fields that are not plain names: {bad}")

    def render(self, **values: Any) -> str:
        """Fill the template. Extra values are ignored (a slot need not use every value it is given)."""
        missing = sorted(self.fields - values.keys())
        if missing:
            raise ConfigurationError(f"prompt {self.name!r} needs values for {missing}")
        return self.text.format(**{k: values[k] for k in self.fields})

    def __repr__(self) -> str:
        return f"PromptTemplate({self.name!r})"


def resolve_prompts(
    pattern: str,
    defaults: Mapping[str, str],
    overrides: Mapping[str, str | PromptTemplate] | None,
    values: Mapping[str, frozenset[str]],
) -> dict[str, PromptTemplate]:
    """The pattern's templates: defaults with ``overrides`` applied.

    ``values`` says which fields each slot is rendered with, so an override that uses a field the
    pattern never supplies fails here, at construction, not in the middle of a run.
    """
    unknown = sorted(set(overrides or {}) - defaults.keys())
    if unknown:
        raise ConfigurationError(f"{pattern} has no prompt slot {unknown}; its slots are {sorted(defaults)}")
    resolved: dict[str, PromptTemplate] = {}
    for slot, default in defaults.items():
        given = (overrides or {}).get(slot, default)
        template = given if isinstance(given, PromptTemplate) else PromptTemplate(given, f"{pattern}:{slot}")
        extra = sorted(template.fields - values.get(slot, frozenset()))
        if extra:
            raise ConfigurationError(
                f"prompt {pattern}:{slot} uses {extra}, which this slot does not provide; "
                f"available: {sorted(values.get(slot, frozenset()))}"
            )
        resolved[slot] = template
    return resolved
