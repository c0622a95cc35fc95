"""Skills: markdown instruction packs added to a reasoning state's system prompt.

A skill file is markdown with optional YAML front matter::

    ---
    name: refunds
    description: How to handle a refund request.
    ---
    1. Ask for the order number.
    2. ...

A skills folder may hold such files directly (``skills/refunds.md``) and skill packages, folders with a
``SKILL.md`` (``skills/pdf/SKILL.md``, the layout Anthropic's skills use). A package's other files are
its resources, not skills. Folders without a ``SKILL.md`` are searched the same way, so skills can be
grouped (``skills/billing/refunds.md``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from baf.errors import ConfigurationError

__all__ = ["Skill"]

_PACKAGE_FILE = "SKILL.md"
# Front matter: a first line of exactly "---", then YAML, then a line of "---" (or YAML's "...").
_FRONT_MATTER_RE = re.compile(r"\A---[ \t]*\r?\n(?P<yaml>.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S | re.M)
_OPENING_RE = re.compile(r"\A---[ \t]*\r?\n")


@dataclass(frozen=True)
class Skill:
    """A named block of instructions for the model.

    Args:
        name: Short identifier, shown as the block's heading.
        content: The markdown instructions.
        description: When the skill applies; shown above the content.
        metadata: Other front matter keys (``license``, ``allowed-tools``, ...), kept for the caller.
        source: The file the skill was read from, if any.

    Raises:
        ConfigurationError: an empty name, or content that is not text.
    """

    name: str
    content: str
    description: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    source: Path | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError(f"a skill needs a non-empty name, got {self.name!r}")
        if not isinstance(self.content, str):
            raise ConfigurationError(f"skill {self.name!r}: content must be text, got {type(self.content).__name__}")
        if self.description is not None and not isinstance(self.description, str):
            raise ConfigurationError(f"skill {self.name!r}: description must be text")
        # Frozen means frozen: a caller's dict must not change the skill behind its back.
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Skill:
        """Read a skill from a markdown file with optional YAML front matter.

        ``name`` defaults to the file's stem, or to the folder's name for a ``SKILL.md``.

        Raises:
            ConfigurationError: front matter that is not closed, not valid YAML or not a mapping; a
                ``name``/``description`` that is not text; a file with no instructions. The message names
                the file.
            OSError: the file cannot be read.
        """
        file = Path(path)
        text = file.read_text(encoding="utf-8-sig")
        front: dict[str, Any] = {}
        body = text
        if _OPENING_RE.match(text):
            match = _FRONT_MATTER_RE.match(text)
            if match is None:
                raise ConfigurationError(f"{file}: front matter opened with '---' is never closed by a '---' line")
            try:
                loaded = yaml.safe_load(match.group("yaml"))
            except yaml.YAMLError as exc:
                raise ConfigurationError(f"{file}: front matter is not valid YAML: {exc}") from exc
            if loaded is not None and not isinstance(loaded, dict):
                raise ConfigurationError(
                    f"{file}: front matter must be a mapping of keys (name, description, ...), "
                    f"got {type(loaded).__name__}"
                )
            front = {str(key): value for key, value in (loaded or {}).items()}
            body = text[match.end() :]
        default_name = file.parent.name if file.name == _PACKAGE_FILE else file.stem
        name = front.pop("name", None) or default_name
        description = front.pop("description", None)
        for key, value in (("name", name), ("description", description)):
            if value is not None and not isinstance(value, str):
                raise ConfigurationError(f"{file}: front matter {key!r} must be text, got {value!r}")
        content = body.strip()
        if not content:
            raise ConfigurationError(f"{file}: the skill has no instructions after its front matter")
        return cls(
            name=name.strip(),
            content=content,
            description=description.strip() if description else None,
            metadata=front,
            source=file,
        )

    @classmethod
    def from_folder(cls, path: str | os.PathLike[str]) -> list[Skill]:
        """Every skill in a folder, in a stable order: the folder's files by name, then its subfolders'.

        Loads ``*.md`` files directly in the folder and ``SKILL.md`` of skill packages; folders without a
        ``SKILL.md`` are searched the same way. A folder that is itself a package (has a ``SKILL.md``)
        gives that one skill. Hidden files and folders (``.name``) are skipped.

        Raises:
            ConfigurationError: the folder does not exist, a file is malformed, or two skills share a name.
        """
        root = Path(path)
        if not root.is_dir():
            raise ConfigurationError(f"skills folder {os.fspath(path)!r} does not exist or is not a folder")
        files: list[Path] = []
        _collect(root, files, seen=set())
        skills: list[Skill] = []
        origin: dict[str, Path] = {}
        for file in files:
            skill = cls.from_file(file)
            if skill.name in origin:
                raise ConfigurationError(
                    f"two skills are named {skill.name!r}: {origin[skill.name]} and {file}; names must be unique"
                )
            origin[skill.name] = file
            skills.append(skill)
        return skills

    def to_prompt(self) -> str:
        """The block added to the system prompt: a heading, the description, then the instructions."""
        lines = [f"## Skill: {self.name}"]
        if self.description:
            lines.append(f"Use when: {self.description}")
        lines += ["", self.content.strip()]
        return "\n".join(lines)


def _collect(folder: Path, files: list[Path], seen: set[Path]) -> None:
    real = folder.resolve()
    if real in seen:  # a symbolic link back up the tree would otherwise recurse forever
        return
    seen.add(real)
    package = folder / _PACKAGE_FILE
    if package.is_file():
        files.append(package)
        return
    children = sorted((child for child in folder.iterdir() if not child.name.startswith(".")), key=lambda p: p.name)
    files.extend(child for child in children if child.is_file() and child.suffix.lower() == ".md")
    for child in children:
        if child.is_dir():
            _collect(child, files, seen)
