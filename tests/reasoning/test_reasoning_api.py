"""The public names of baf.reasoning."""

import importlib

import baf.reasoning


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in vars(baf.reasoning) if not name.startswith("_")}
    submodules = {"skill", "tool", "workspace", "patterns", "effects", "step", "toolset", "mcp", "a2a",
                  "recorder", "resume", "streaming", "tool_calls", "turn"}  # fmt: skip
    assert set(baf.reasoning.__all__) == public - submodules
    assert set(baf.reasoning.__all__) == {"Skill", "Tool", "Workspace", "WorkspaceEntry", "workspace_tools"}


def test_documented_module_paths_work() -> None:
    # The names the architecture promises users; the tool module must not be shadowed by the decorator.
    assert importlib.import_module("baf.reasoning.tool").Tool is baf.reasoning.Tool
    assert baf.reasoning.tool.Tool is baf.reasoning.Tool
    assert importlib.import_module("baf.reasoning.skill").Skill is baf.reasoning.Skill
    assert importlib.import_module("baf.reasoning.workspace").Workspace is baf.reasoning.Workspace


def test_reasoning_does_not_depend_on_core_or_library() -> None:
    # Dependency arrows: reasoning may use llm, never core or library.
    import ast
    from pathlib import Path

    for path in Path(baf.reasoning.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                assert not name.startswith(("baf.core", "baf.library")), f"{path.name} imports {name}"
