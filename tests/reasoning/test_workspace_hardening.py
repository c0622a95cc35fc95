"""Workspace hardening: protected names (.git, .env ...), the write size limit and hard links, on real folders."""

import os
from pathlib import Path

import pytest

from baf.errors import ConfigurationError, ToolError, WorkspaceError
from baf.reasoning import Workspace, workspace_tools
from baf.reasoning.workspace import DEFAULT_PROTECTED


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A checkout: a .git folder with a config, a .env with a secret, and ordinary files."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (root / ".env").write_text("API_KEY=sk-live-123456\n")
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('hi')\n")
    return root


@pytest.mark.parametrize(
    "path",
    [
        ".git/config",
        ".git/hooks/pre-commit",
        "./.git/config",
        "src/../.git/config",
        ".GIT/config",
        ".hg/hgrc",
        ".svn/entries",
        ".env",
        "src/.git/config",
    ],
)
def test_writes_to_version_control_metadata_and_env_files_are_refused(repo: Path, path: str) -> None:
    ws = Workspace(repo, writable=True)
    before = (repo / ".git" / "config").read_text()
    with pytest.raises(WorkspaceError, match="is protected"):
        ws.write_file(path, '[core]\n\tfsmonitor = "touch /tmp/pwned"\n')
    with pytest.raises(WorkspaceError, match="is protected"):
        ws.create_file(path + ".new", "x")
    assert (repo / ".git" / "config").read_text() == before
    assert not (repo / ".git" / "hooks").exists()


def test_deleting_protected_files_is_refused(repo: Path) -> None:
    ws = Workspace(repo, writable=True)
    with pytest.raises(WorkspaceError, match="is protected"):
        ws.delete_file(".git/config")
    with pytest.raises(WorkspaceError, match="is protected"):
        ws.delete_file(".env")
    assert (repo / ".git" / "config").exists() and (repo / ".env").exists()


def test_a_symbolic_link_to_git_metadata_is_refused_too(repo: Path) -> None:
    (repo / "innocent").symlink_to(".git")
    ws = Workspace(repo, writable=True)
    with pytest.raises(WorkspaceError, match=r"'\.git' is protected"):
        ws.write_file("innocent/config", "[core]\n\tfsmonitor = evil\n")
    with pytest.raises(WorkspaceError, match="is protected"):
        ws.read_file("innocent/config")
    assert "fsmonitor" not in (repo / ".git" / "config").read_text()


def test_reads_and_listings_of_protected_paths_are_refused_unless_allowed(repo: Path) -> None:
    ws = Workspace(repo)
    with pytest.raises(WorkspaceError, match=r"cannot read '\.env'"):
        ws.read_file(".env")
    with pytest.raises(WorkspaceError, match=r"cannot list '\.git'"):
        ws.list_directory(".git")
    # The root listing still shows that they exist; the preview does not go inside.
    assert ".git/" in ws.list_directory(".")
    assert "config" not in ws.preview()
    opened = Workspace(repo, allow_protected_reads=True, writable=True)
    assert "sk-live" in opened.read_file(".env")
    assert "config" in opened.list_directory(".git")
    with pytest.raises(WorkspaceError, match="is protected"):  # reading allowed, writing still not
        opened.write_file(".git/config", "x")


async def test_the_model_gets_the_refusal_as_a_tool_error(repo: Path) -> None:
    tools = {tool.name: tool for tool in workspace_tools([Workspace(repo, writable=True)])}
    with pytest.raises(ToolError, match=r"'\.git' is protected in workspace 'workspace'"):
        await tools["write_file"].run('{"relative_path": ".git/config", "content": "x"}')


def test_the_protected_list_is_configurable(repo: Path) -> None:
    (repo / "keys").mkdir()
    (repo / "keys" / "server.pem").write_text("-----BEGIN-----")
    ws = Workspace(repo, writable=True, protected=[*DEFAULT_PROTECTED, "*.pem"])
    with pytest.raises(WorkspaceError, match=r"'server\.pem' is protected"):
        ws.read_file("keys/server.pem")
    nothing = Workspace(repo, writable=True, protected=())
    nothing.write_file(".env", "A=1\n")
    assert (repo / ".env").read_text() == "A=1\n"
    with pytest.raises(ConfigurationError, match="protected"):
        Workspace(repo, protected=".git")  # a string, not a list of names


def test_writes_over_the_size_limit_are_refused_before_anything_is_written(repo: Path) -> None:
    ws = Workspace(repo, writable=True)
    big = "x" * (50 * 1024 * 1024)
    with pytest.raises(WorkspaceError, match=r"52,428,800 bytes is over the limit of 1,048,576 bytes"):
        ws.write_file("src/main.py", big)
    with pytest.raises(WorkspaceError, match="over the limit"):
        ws.create_file("big.txt", big)
    assert (repo / "src" / "main.py").read_text() == "print('hi')\n"
    assert not (repo / "big.txt").exists()
    small = Workspace(repo, writable=True, max_write_bytes=10)
    small.write_file("ok.txt", "0123456789")
    with pytest.raises(WorkspaceError, match="11 bytes is over the limit of 10 bytes"):
        small.write_file("ok.txt", "é123456789")  # counted in UTF-8 bytes, not characters
    with pytest.raises(ConfigurationError, match="max_write_bytes"):
        Workspace(repo, max_write_bytes=0)


def test_writing_through_a_hard_link_to_a_file_outside_is_refused(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "passwd"
    outside.write_text("root:x:0:0\n")
    os.link(outside, repo / "linked.txt")
    ws = Workspace(repo, writable=True)
    with pytest.raises(WorkspaceError, match="2 hard links"):
        ws.write_file("linked.txt", "owned\n")
    assert outside.read_text() == "root:x:0:0\n"
    assert ws.read_file("linked.txt") == "root:x:0:0\n"  # reads are allowed
    ws.delete_file("linked.txt")  # removing the name inside the workspace leaves the other file alone
    assert outside.read_text() == "root:x:0:0\n"
    os.link(outside, repo / "linked.txt")
    Workspace(repo, writable=True, allow_hard_links=True).write_file("linked.txt", "allowed\n")
    assert outside.read_text() == "allowed\n"


def test_hard_links_are_refused_on_the_checked_path_fallback_too(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import baf.reasoning.workspace as workspace_module

    monkeypatch.setattr(workspace_module, "_RACE_FREE_WRITES", False)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    os.link(outside, repo / "linked.txt")
    with pytest.raises(WorkspaceError, match="2 hard links"):
        Workspace(repo, writable=True).write_file("linked.txt", "owned\n")
    assert outside.read_text() == "keep\n"
