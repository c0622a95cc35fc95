"""Every import inside baf/ points down the layer table of DESIGN.md ("Packages").

The table below is DESIGN.md's, read as layers: a package may import the packages it depends on and,
through them, theirs (``library`` depends on ``core``, which depends on ``log``, so a library body may
name a record kind). Two arrows are narrower than their layer: ``core`` uses only the reasoning
primitives (Tool, Skill, Workspace, and the Toolset protocol the runtime starts and stops), and ``llm``
only the log's redaction. ``baf/__init__.py`` (the public
names) and ``cli.py`` (the ``baf`` command) may import anything. Every ``.py`` file under baf/ is read,
at any depth, with every import in it: module level, inside functions, and under ``TYPE_CHECKING``.
An arrow against the table is allowed only if :data:`EXCEPTIONS` lists it with its reason, and only as a
lazy import (inside a function, or for type checking), so importing the lower layer never loads it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import baf

ROOT = Path(baf.__file__).parent

#: DESIGN.md's table: each package and what it depends on.
DEPENDS_ON: dict[str, set[str]] = {
    # Not in DESIGN.md's table yet: how counts are worded, below everything (it imports nothing of baf).
    "wording": set(),
    "errors": {"wording"},
    "log": {"errors"},
    "llm": {"log"},
    "reasoning": {"llm", "log"},
    "core": {"reasoning", "log"},
    "library": {"core", "reasoning", "llm"},
    "platforms": {"core"},
    "telemetry": {"core", "log"},
    # DESIGN.md's table lists core, library, log; its text has the offline export share telemetry's mapping.
    "replay": {"core", "library", "log", "telemetry"},
    "declarative": {"core", "library", "platforms"},
    "serve": {"core", "log", "platforms"},
    "testing": {"core", "log", "llm"},
}

#: Arrows narrower than their layer: (from package, to package) -> the modules allowed.
ONLY: dict[tuple[str, str], set[str]] = {
    ("core", "reasoning"): {
        "baf.reasoning.approval",  # the request a platform is shown (Platform.reply_approval_request)
        "baf.reasoning.tool",
        "baf.reasoning.skill",
        "baf.reasoning.workspace",
        "baf.reasoning.toolset",
        "baf.reasoning.step",  # ReasoningStep, rebuilt from its record for delivery from the log
    },
    ("llm", "log"): {"baf.log.redaction"},
}

#: Modules that may import anything: the public names and the command line.
TOP = {"baf", "baf.cli"}


@dataclass(frozen=True)
class Allowed:
    """An arrow against the table, with its reason. ``lazy``: only inside a function or for type
    checking (importing the lower layer must not load the higher one)."""

    reason: str
    lazy: bool = True


#: Arrows against the table: (importing module, imported module) -> why.
EXCEPTIONS: dict[tuple[str, str], Allowed] = {
    ("baf.core.agent", "baf.platforms.terminal"): Allowed(
        "Agent.use_terminal_platform: a convenience that builds the adapter and attaches it; imported in "
        "the method (and for its return type), so the core loads without rich"
    ),
    ("baf.core.agent", "baf.platforms.websocket"): Allowed(
        "Agent.use_websocket_platform: the same convenience for the WebSocket platform (the 'web' extra)"
    ),
    ("baf.core.agent", "baf.platforms.telegram"): Allowed(
        "Agent.use_telegram_platform: the same convenience for the Telegram platform (the 'telegram' extra)"
    ),
    ("baf.core.agent", "baf.platforms.a2a"): Allowed(
        "Agent.use_a2a_platform: the same convenience for the A2A server platform (the 'a2a' extra)"
    ),
    ("baf.core.agent", "baf.reasoning.a2a"): Allowed(
        "Agent.add_a2a_agent: a convenience that builds the A2A client tool (a plain Tool) and registers it "
        "as any tool; imported in the method, so the core loads without the 'a2a' extra"
    ),
    ("baf.core.agent", "baf.reasoning.mcp"): Allowed(
        "Agent.add_mcp_server: a convenience that builds the MCP toolset and attaches it as any toolset; "
        "imported in the method (and for its return type)"
    ),
    ("baf.testing.platform_contract", "baf.library.state.reasoning_state_library"): Allowed(
        "the platform contract kit drives the real reasoning body to check that a platform shows its "
        "steps and task lists; imported in that one test, so the kit loads without the library"
    ),
    ("baf.serve.process", "baf.cli"): Allowed(
        "a baf serve worker process loads the agent file exactly as baf run does (a Python file or a YAML "
        "agent), through the one loader the CLI has; imported in the worker's entry function"
    ),
    ("baf.core.intent_routing", "baf.reasoning.effects"): Allowed(
        "a re-run serves each intent prediction from the log through the current effect source, the one "
        "channel it serves model responses and tool results through (a context variable, no code of the "
        "reasoning kernel runs)",
        lazy=False,
    ),
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module (``from baf.x import y`` counts as baf.x)
    lazy: bool  # inside a function or under TYPE_CHECKING: not run when ``module`` is imported
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str) -> str:
    """``baf.core.agent`` -> ``core``; ``baf.errors`` -> ``errors``; ``baf`` -> ``baf``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def imports_of(path: Path, module: str | None = None) -> list[Import]:
    """The baf imports of the file at ``path`` (the module ``module``, by default its name under baf/)."""
    module = module or module_name(path)
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            child_lazy = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for statement in child.body:
                    visit_statement(statement, True)
                for statement in child.orelse:
                    visit_statement(statement, lazy)
                continue
            visit_statement(child, child_lazy, recurse=False)
            visit(child, child_lazy)

    def visit_statement(node: ast.AST, lazy: bool, recurse: bool = True) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(module, alias.name, lazy, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative imports hide the arrow; write it out"
            if node.module is not None:
                found.append(Import(module, node.module, lazy, node.lineno))
        if recurse:
            visit(node, lazy)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return [i for i in found if i.target == "baf" or i.target.startswith("baf.")]


def reachable(package: str) -> set[str]:
    """What ``package`` may import: its dependencies and theirs."""
    seen: set[str] = set()
    todo = list(DEPENDS_ON[package])
    while todo:
        dependency = todo.pop()
        if dependency not in seen:
            seen.add(dependency)
            todo.extend(DEPENDS_ON[dependency])
    return seen


def against_the_table(imported: Import) -> str | None:
    """Why ``imported`` breaks the table, or ``None`` if it keeps it."""
    if imported.module in TOP:
        return None
    source, target = package_of(imported.module), package_of(imported.target)
    if source not in DEPENDS_ON:
        return f"package {source!r} is not in the table (add it to DESIGN.md and here)"
    if target == "baf":
        return "imports the top-level package (its names load the runtime): import from where they live"
    if source == target:
        return None
    if target not in reachable(source):
        return f"{source} does not depend on {target}"
    allowed = ONLY.get((source, target))
    if allowed is not None and not any(imported.target == m or imported.target.startswith(m + ".") for m in allowed):
        return f"{source} uses only {sorted(allowed)} of {target}"
    return None


def all_imports() -> list[Import]:
    files = sorted(ROOT.rglob("*.py"))
    assert any(len(f.relative_to(ROOT).parts) > 2 for f in files), "the walk must reach nested packages"
    return [imported for path in files for imported in imports_of(path)]


def test_every_import_in_baf_points_down_the_table() -> None:
    wrong = []
    for imported in all_imports():
        reason = against_the_table(imported)
        if reason is None:
            continue
        listed = EXCEPTIONS.get((imported.module, imported.target))
        if listed is not None and (imported.lazy or not listed.lazy):
            continue
        where = f"{imported.module} (line {imported.line}) imports {imported.target}"
        wrong.append(f"{where}: {reason}" + (" (listed, but imported eagerly)" if listed else ""))
    assert not wrong, "imports against DESIGN.md's table:\n" + "\n".join(wrong)


def test_every_listed_exception_is_still_needed() -> None:
    used = {(i.module, i.target) for i in all_imports() if against_the_table(i) is not None}
    assert set(EXCEPTIONS) <= used, f"no longer needed, remove: {sorted(set(EXCEPTIONS) - used)}"


def test_the_check_sees_wrong_arrows(tmp_path: Path) -> None:
    # The checker itself: an upward import, a nested one, a type-only one, and a narrow arrow overstepped.
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from baf.platforms.terminal import TerminalPlatform\n"
        "def f():\n    from baf.replay import rerun\n"
        "if TYPE_CHECKING:\n    from baf.library.demo import main\n"
        "from baf.reasoning.effects import use_effect_source\n",
        encoding="utf-8",
    )
    found = imports_of(source, "baf.core.probe")
    verdicts = {(i.target, i.lazy): against_the_table(i) for i in found}
    assert verdicts == {
        ("baf.platforms.terminal", False): "core does not depend on platforms",
        ("baf.replay", True): "core does not depend on replay",
        ("baf.library.demo", True): "core does not depend on library",
        ("baf.reasoning.effects", False): (
            "core uses only ['baf.reasoning.approval', 'baf.reasoning.skill', 'baf.reasoning.step', "
            "'baf.reasoning.tool', "
            "'baf.reasoning.toolset', 'baf.reasoning.workspace'] of reasoning"
        ),
    }
