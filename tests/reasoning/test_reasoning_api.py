"""The public names of baf.reasoning."""

import importlib
import types

import baf.reasoning


def test_all_lists_exactly_the_public_names() -> None:
    # Submodules become attributes of the package once anything imports them; they are not names it exports.
    public = {
        name for name, value in vars(baf.reasoning).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }  # fmt: skip
    assert set(baf.reasoning.__all__) == public
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
