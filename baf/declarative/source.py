"""Reading a YAML agent file safely, keeping where each value was written.

PyYAML's safe loader builds the node graph (no Python objects, no tags beyond the standard ones);
:func:`read_yaml` then turns nodes into plain values itself, so that

- every mapping, list and value keeps its line and column (:class:`Marks`, by path), which validation
  errors name;
- aliases are expanded under a budget: a file whose aliases multiply (the "billion laughs" YAML bomb)
  stops at :data:`MAX_NODES` values instead of filling memory; anchors used for plain reuse still work,
  merge keys (``<<: *defaults``) included;
- a key written twice in one mapping is an error (PyYAML would keep the last silently);
- keys are always text, and only ``true``/``false`` are booleans (YAML 1.2): with YAML 1.1's rules
  ``on:`` would be the key ``True`` and ``answer: no`` the value ``False``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "Marks", "YAMLSourceError", "read_yaml"]

#: The largest agent file read, in bytes.
MAX_BYTES = 2_000_000
#: The most values (after alias expansion) one file may produce.
MAX_NODES = 100_000
#: The deepest nesting of mappings and lists.
MAX_DEPTH = 64

Path = tuple[str | int, ...]


class YAMLSourceError(ValueError):
    """The text is not a YAML agent file that can be read at all; ``line``/``column`` count from 1."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


@dataclass
class Marks:
    """Where each value came from: ``(line, column)`` by path (``("states", 0, "name")``), from 1."""

    values: dict[Path, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path, tuple[int, int]] = field(default_factory=dict)

    def find(self, path: Path, *, key: bool = False) -> tuple[int, int]:
        """The mark of ``path`` (of its key when ``key``), else of its nearest ancestor; (0, 0) if none."""
        table = self.keys if key else self.values
        if path in table:
            return table[path]
        for cut in range(len(path) - 1, -1, -1):
            prefix = path[:cut]
            if prefix in self.values:
                return self.values[prefix]
        return (0, 0)


def read_yaml(text: str) -> tuple[Any, Marks]:
    """The value of ``text`` (one YAML document) and its marks."""
    if len(text.encode("utf-8", "replace")) > MAX_BYTES:
        raise YAMLSourceError(f"the file is larger than {MAX_BYTES} bytes")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        raise YAMLSourceError(f"not valid YAML: {exc.problem or exc}", line, column) from None
    except yaml.YAMLError as exc:
        raise YAMLSourceError(f"not valid YAML: {exc}") from None
    marks = Marks()
    if node is None:
        return None, marks
    builder = _Builder(marks)
    return builder.build(node, (), 0), marks


class _Builder:
    def __init__(self, marks: Marks) -> None:
        self.marks = marks
        self.count = 0
        self.constructor = yaml.SafeLoader("")  # constructs scalars by their resolved tags

    def build(self, node: yaml.Node, path: Path, depth: int) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise YAMLSourceError(
                f"the file expands to more than {MAX_NODES} values (aliases that multiply: a YAML bomb?)",
                *_mark(node),
            )
        if depth > MAX_DEPTH:
            raise YAMLSourceError(f"nested deeper than {MAX_DEPTH} levels", *_mark(node))
        self.marks.values.setdefault(path, _mark(node))
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, index), depth + 1) for index, item in enumerate(node.value)]
        if node.tag == _BOOL and str(node.value).lower() not in ("true", "false"):
            return str(node.value)  # YAML 1.2 booleans only: `yes`, `no`, `on`, `off` are text (Norway)
        try:
            return self.constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise YAMLSourceError(f"cannot read this value: {exc}", *_mark(node)) from None

    def _mapping(self, node: yaml.MappingNode, path: Path, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                for source in value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]:
                    if not isinstance(source, yaml.MappingNode):
                        raise YAMLSourceError("'<<' merges a mapping or a list of mappings", *_mark(source))
                    for key, value in self._mapping(source, path, depth + 1).items():
                        merged.setdefault(key, value)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise YAMLSourceError("a key must be plain text, not a mapping or a list", *_mark(key_node))
            key = str(key_node.value)  # keys are names: `on`, `yes`, `1` stay text (YAML 1.1 would read on: True)
            if key in result:
                raise YAMLSourceError(f"key {key!r} is written twice in this mapping", *_mark(key_node))
            self.marks.keys[(*path, key)] = _mark(key_node)
            result[key] = self.build(value_node, (*path, key), depth + 1)
        return {**merged, **result}


_BOOL = "tag:yaml.org,2002:bool"


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1
