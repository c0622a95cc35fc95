"""Working memory shared by pattern runs: each pattern its own scope, every scope readable by the others.

``pattern.execute(llm, input, memory=MemoryManager())`` (or ``pattern_body(..., memory=True)`` in a
state, where the scopes are session variables) gives the run a scope named ``reasoning:<pattern name>``
(:func:`scope_name`), started empty, and then

1. before each model call, *enriches* the call: a ``Working memory`` section at the top of its system
   message lists the outputs the other scopes hold and the latest entries of the run's own scope
   (:meth:`WorkingMemory.context`);
2. *persists* each step as the run emits it: ``reasoning:step:<n>`` (n counts the run's own steps from
   1) and ``reasoning:last_step``, each ``"<kind>: <summary>"``;
3. stores the output's text (:func:`~baf.reasoning.patterns.result.as_text`) under ``reasoning:output``
   when the run returns a result, a partial one included.

A pipeline hands its memory to every stage (as any run hands it to the runs it delegates to), so each
stage sees the outputs of the stages before it. Two stages with the same name share one scope, the later
one starting it afresh: name them apart.

Where the scopes live is the manager's ``write`` callback's business: without one they are only in the
manager (held as long as you keep it, across runs); the session-backed manager of
:func:`baf.library.state.pattern_state.session_memory` writes each change as a session variable named
after the scope, so ``baf replay``, a re-run and a resumed run see the memory as the run had it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from baf.reasoning.step import ReasoningStep

__all__ = ["LAST_STEP_KEY", "OUTPUT_KEY", "MemoryManager", "WorkingMemory", "is_scope", "scope_name", "step_key"]

#: The key of a scope holding its run's output (text).
OUTPUT_KEY = "reasoning:output"
#: The key of a scope holding the latest step of its run.
LAST_STEP_KEY = "reasoning:last_step"
_SCOPE_PREFIX = "reasoning:"
#: Entries of its own scope a run's calls are shown (the latest), and characters shown of one value.
CONTEXT_ENTRIES = 10
CONTEXT_VALUE_CHARS = 2000


def scope_name(pattern: str) -> str:
    """The scope of the pattern named ``pattern``: ``reasoning:<pattern>``."""
    return f"{_SCOPE_PREFIX}{pattern}"


def is_scope(name: str, value: Any) -> bool:
    """Whether a variable ``name`` holding ``value`` is a working-memory scope (``reasoning:...``, an object)."""
    return name.startswith(_SCOPE_PREFIX) and isinstance(value, dict)


def step_key(number: int) -> str:
    """The key of a run's ``number``-th step (from 1) in its scope."""
    return f"reasoning:step:{number}"


class MemoryManager:
    """Working memory for pattern runs: named scopes of ``key -> value`` (see the module docstring).

    Args:
        scopes: Scopes to start with (copied), e.g. those a session holds.
        write: Called with ``(scope, values)`` after every change of a scope; values must then be
            JSON-serialisable (the session-backed manager records them as a session variable).
    """

    def __init__(
        self,
        scopes: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        write: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self._scopes: dict[str, dict[str, Any]] = {name: copy.deepcopy(dict(values))
                                                   for name, values in (scopes or {}).items()}  # fmt: skip
        self._write = write

    def __repr__(self) -> str:
        return f"MemoryManager(scopes={list(self._scopes)})"

    def fork(self, pattern: str) -> WorkingMemory:
        """Start the scope of ``pattern`` afresh (what an earlier run left in it is dropped) and return it."""
        name = scope_name(pattern)
        self._scopes[name] = {}
        self._save(name)
        return WorkingMemory(self, name)

    def scopes(self) -> dict[str, dict[str, Any]]:
        """Every scope, in the order they were first written (copies)."""
        return copy.deepcopy(self._scopes)

    def scope(self, name: str) -> dict[str, Any]:
        """The values of scope ``name`` (a copy; empty when it does not exist). A pattern's name is
        taken for its scope: ``scope("react")`` is ``scope("reasoning:react")``."""
        return copy.deepcopy(self._scopes.get(self._full(name), {}))

    def get(self, scope: str, key: str, default: Any = None) -> Any:
        """One value of a scope (a pattern's name is taken for its scope), or ``default``."""
        return copy.deepcopy(self._scopes.get(self._full(scope), {}).get(key, default))

    def set(self, scope: str, key: str, value: Any) -> None:
        """Set one value of a scope (created if needed) and write the scope."""
        self.update(scope, {key: value})

    def update(self, scope: str, values: Mapping[str, Any]) -> None:
        """Set several values of a scope (created if needed) and write the scope once."""
        name = self._full(scope)
        self._scopes.setdefault(name, {}).update(values)
        self._save(name)

    def outputs(self) -> dict[str, Any]:
        """The output every scope holds, by scope."""
        return {name: values[OUTPUT_KEY] for name, values in self._scopes.items() if OUTPUT_KEY in values}

    @staticmethod
    def _full(name: str) -> str:
        return name if name.startswith(_SCOPE_PREFIX) else scope_name(name)

    def _save(self, name: str) -> None:
        if self._write is not None:
            self._write(name, dict(self._scopes[name]))


class WorkingMemory:
    """One run's scope of a :class:`MemoryManager` (what :meth:`MemoryManager.fork` returns)."""

    def __init__(self, manager: MemoryManager, name: str) -> None:
        self.manager = manager
        self.name = name
        self._steps = 0

    def __repr__(self) -> str:
        return f"WorkingMemory({self.name!r})"

    def get(self, key: str, default: Any = None) -> Any:
        """A value of this scope, or ``default``."""
        return self.manager.get(self.name, key, default)

    def set(self, key: str, value: Any) -> None:
        """Set a value of this scope (written at once)."""
        self.manager.set(self.name, key, value)

    def persist_step(self, step: ReasoningStep) -> None:
        """Keep ``step`` as this run's next ``reasoning:step:<n>`` and as ``reasoning:last_step``."""
        self._steps += 1
        text = f"{step.kind}: {step.summary}"
        self.manager.update(self.name, {step_key(self._steps): text, LAST_STEP_KEY: text})

    def store_output(self, output: str) -> None:
        """Keep the run's output (text) under ``reasoning:output``."""
        self.set(OUTPUT_KEY, output)

    def context(self) -> str:
        """What a model call is shown: the other scopes' outputs, then this scope's latest entries
        (``reasoning:last_step`` left out: it repeats the latest step). Empty when there is nothing."""
        lines: list[str] = []
        others = [(name, output) for name, output in self.manager.outputs().items() if name != self.name]
        if others:
            lines.append("Outputs of earlier reasoning:")
            lines += [f"- {name}: {_shown(output)}" for name, output in others]
        own = [(key, value) for key, value in self.manager.scope(self.name).items() if key != LAST_STEP_KEY]
        if own:
            lines.append("This run so far:")
            lines += [f"- {key}: {_shown(value)}" for key, value in own[-CONTEXT_ENTRIES:]]
        return "## Working memory\n" + "\n".join(lines) if lines else ""

    def enrich(self, system: str | None) -> str | None:
        """``system`` with :meth:`context` in front (``system`` itself when the memory is empty)."""
        context = self.context()
        if not context:
            return system
        return context if system is None else f"{context}\n\n{system}"


def _shown(value: Any) -> str:
    text = " ".join(str(value).split())
    limit = CONTEXT_VALUE_CHARS
    return text if len(text) <= limit else f"{text[: limit - 1]}… [{len(text)} characters]"
