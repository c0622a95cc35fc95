"""Workspace: path security on real folders, reading, writing, previews and the model's tools."""

import os
from pathlib import Path

import pytest

from baf.errors import ConfigurationError, PathEscapeError, ToolArgumentError, ToolError, WorkspaceError
from baf.reasoning import Tool, Workspace, workspace_tools


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """tmp/ws (the root), tmp/ws2 (a sibling sharing its prefix), tmp/outside (secrets)."""
    root = tmp_path / "ws"
    (root / "docs" / "deep").mkdir(parents=True)
    (root / "readme.md").write_text("# Hello\n")
    (root / "docs" / "guide.txt").write_text("guide text")
    (root / "docs" / "deep" / "leaf.txt").write_text("leaf")
    (tmp_path / "ws2").mkdir()
    (tmp_path / "ws2" / "secret.txt").write_text("sibling secret")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("outside secret")
    return root


@pytest.fixture
def ws(layout: Path) -> Workspace:
    return Workspace(layout, name="docs", description="Product documentation")


@pytest.fixture
def rw(layout: Path) -> Workspace:
    return Workspace(layout, name="scratch", writable=True)


# ---- escapes ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../outside/secret.txt", "uses '..' to leave"),
        ("docs/../../outside/secret.txt", "uses '..' to leave"),
        ("..", "uses '..' to leave"),
        ("../ws/readme.md", "uses '..' to leave"),  # leaves and comes back: still refused
        ("../ws2/secret.txt", "uses '..' to leave"),
        ("/etc/passwd", "is absolute"),
        ("readme.md\x00.txt", "NUL byte"),
    ],
)
def test_lexical_escapes_are_refused(ws: Workspace, path: str, message: str) -> None:
    with pytest.raises(PathEscapeError, match=message):
        ws.read_file(path)
    with pytest.raises(PathEscapeError):
        ws.list_directory(path)


def test_absolute_path_into_the_root_is_still_refused(ws: Workspace) -> None:
    with pytest.raises(PathEscapeError, match="is absolute"):
        ws.read_file(str(ws.root / "readme.md"))


def test_symlinked_file_pointing_outside_is_refused(ws: Workspace, layout: Path) -> None:
    (layout / "link.txt").symlink_to(layout.parent / "outside" / "secret.txt")
    with pytest.raises(PathEscapeError, match="symbolic link that leads outside workspace 'docs'") as info:
        ws.read_file("link.txt")
    assert str(layout.parent) not in str(info.value)  # the target is not revealed to the model


def test_symlinked_parent_folder_pointing_outside_is_refused(ws: Workspace, layout: Path) -> None:
    (layout / "docs" / "escape").symlink_to(layout.parent / "outside", target_is_directory=True)
    with pytest.raises(PathEscapeError, match="symbolic link"):
        ws.read_file("docs/escape/secret.txt")
    with pytest.raises(PathEscapeError):
        ws.list_directory("docs/escape")


def test_sibling_sharing_the_root_prefix_is_refused(ws: Workspace, layout: Path) -> None:
    # /tmp/x/ws2 starts with the string /tmp/x/ws; only a real containment check refuses it.
    sibling = layout.parent / "ws2"
    assert str(sibling).startswith(str(layout))
    (layout / "sib").symlink_to(sibling, target_is_directory=True)
    with pytest.raises(PathEscapeError):
        ws.read_file("sib/secret.txt")


def test_dangling_link_pointing_outside_cannot_be_created_through(rw: Workspace, layout: Path) -> None:
    target = layout.parent / "outside" / "new.txt"
    (layout / "trap.txt").symlink_to(target)
    with pytest.raises(PathEscapeError):
        rw.write_file("trap.txt", "x")
    with pytest.raises(PathEscapeError):
        rw.create_file("trap.txt", "x")
    assert not target.exists()


def test_symlink_loop_is_a_clear_error(ws: Workspace, layout: Path) -> None:
    (layout / "loop").symlink_to(layout / "loop")
    with pytest.raises(WorkspaceError):
        ws.read_file("loop")


def test_symlink_inside_the_root_is_allowed(ws: Workspace, layout: Path) -> None:
    (layout / "alias.txt").symlink_to(layout / "docs" / "guide.txt")
    (layout / "shortcut").symlink_to(layout / "docs" / "deep", target_is_directory=True)
    (layout / "docs" / "up").symlink_to(Path("..") / "readme.md")  # relative link, still inside
    assert ws.read_file("alias.txt") == "guide text"
    assert ws.read_file("shortcut/leaf.txt") == "leaf"
    assert ws.read_file("docs/up") == "# Hello\n"


def test_harmless_relative_forms_are_allowed(ws: Workspace) -> None:
    assert ws.read_file("./docs/../readme.md") == "# Hello\n"
    assert ws.read_file("docs/./guide.txt") == "guide text"
    assert ws.resolve("") == ws.root and ws.resolve(".") == ws.root


def test_symlinked_root_is_resolved_once(layout: Path, tmp_path: Path) -> None:
    (tmp_path / "root-link").symlink_to(layout, target_is_directory=True)
    assert Workspace(tmp_path / "root-link").read_file("readme.md") == "# Hello\n"


def test_constructor_checks(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not found"):
        Workspace(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigurationError, match="not a folder"):
        Workspace(tmp_path / "file")
    with pytest.raises(ConfigurationError, match="max_read_bytes"):
        Workspace(tmp_path, max_read_bytes=0)
    with pytest.raises(ConfigurationError, match="name"):
        Workspace(tmp_path, name=" ")


# ---- reading ---------------------------------------------------------------------------------------------


def test_list_directory(ws: Workspace, layout: Path) -> None:
    (layout / "big.bin").write_bytes(b"\x00" * 2048)
    (layout / "out").symlink_to(layout.parent / "outside", target_is_directory=True)
    (layout / "dangling").symlink_to(layout / "nothing-here")
    assert ws.list_directory() == (
        "Folder '.' in workspace 'docs' (5 entries):\n"
        "docs/\n"
        "out [symbolic link leading outside the workspace, not accessible]\n"
        "big.bin (2.0 KB)\n"
        "dangling [broken symbolic link]\n"
        "readme.md (8 B)"
    )
    assert ws.list_directory("docs") == (
        "Folder 'docs' in workspace 'docs' (2 entries):\ndocs/deep/\ndocs/guide.txt (10 B)"
    )


def test_list_directory_errors_and_empty(ws: Workspace, layout: Path) -> None:
    (layout / "empty").mkdir()
    assert ws.list_directory("empty") == "Folder 'empty' in workspace 'docs' is empty."
    with pytest.raises(WorkspaceError, match="no folder 'nope'"):
        ws.list_directory("nope")
    with pytest.raises(WorkspaceError, match="is a file; use read_file"):
        ws.list_directory("readme.md")


def test_list_directory_is_capped(layout: Path) -> None:
    for i in range(12):
        (layout / "docs" / f"f{i:02}.txt").write_text("x")
    listing = Workspace(layout, max_list_entries=5).list_directory("docs")
    lines = listing.splitlines()
    assert lines[0] == "Folder 'docs' in workspace 'workspace' (14 entries):"
    assert lines[1:6] == ["docs/deep/", *(f"docs/f{i:02}.txt (1 B)" for i in range(4))]
    assert lines[-1] == "[... 9 more entries not shown]"


def test_entries_are_structured(ws: Workspace) -> None:
    entries = ws.entries("docs")
    assert [(e.path, e.kind, e.size) for e in entries] == [
        ("docs/deep", "directory", None),
        ("docs/guide.txt", "file", 10),
    ]


def test_read_file_utf8_with_replacement(ws: Workspace, layout: Path) -> None:
    (layout / "mixed.txt").write_bytes("café ".encode() + b"\xff\xfe bad")
    assert ws.read_file("mixed.txt") == "café \ufffd\ufffd bad"
    (layout / "bom.txt").write_bytes(b"\xef\xbb\xbfhi")
    assert ws.read_file("bom.txt") == "hi"


def test_read_file_truncates_with_the_original_size(layout: Path) -> None:
    (layout / "long.txt").write_text("é" * 600)  # 1200 bytes; the cut falls inside a character
    text = Workspace(layout, max_read_bytes=101).read_file("long.txt")
    body, marker = text.split("\n\n[truncated")
    assert body == "é" * 50  # the half character at the cut is held back, not mangled
    assert marker == ": showing the first 101 bytes of 'long.txt', which is 1,200 bytes in total]"


def test_read_file_exactly_at_the_limit_is_not_truncated(layout: Path) -> None:
    (layout / "exact.txt").write_text("x" * 100)
    assert Workspace(layout, max_read_bytes=100).read_file("exact.txt") == "x" * 100


def test_binary_files_are_refused(ws: Workspace, layout: Path) -> None:
    (layout / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    with pytest.raises(WorkspaceError, match=r"'image.png' looks like a binary file .*only text files"):
        ws.read_file("image.png")
    (layout / "controls.bin").write_bytes(bytes([1, 2, 3, 4, 5, 6]) * 50 + b"text")
    with pytest.raises(WorkspaceError, match="binary"):
        ws.read_file("controls.bin")


def test_read_file_errors(ws: Workspace, layout: Path) -> None:
    with pytest.raises(WorkspaceError, match=r"no file 'missing.txt' in workspace 'docs'"):
        ws.read_file("missing.txt")
    with pytest.raises(WorkspaceError, match="is a folder; use list_directory"):
        ws.read_file("docs")
    os.mkfifo(layout / "pipe")
    with pytest.raises(WorkspaceError, match="not a regular file"):
        ws.read_file("pipe")


# ---- writing ---------------------------------------------------------------------------------------------


def test_read_only_is_the_default_and_refuses_every_write(ws: Workspace, layout: Path) -> None:
    assert not ws.writable
    writes = (
        lambda: ws.write_file("readme.md", "x"),
        lambda: ws.create_file("new.md", "x"),
        lambda: ws.delete_file("readme.md"),
    )
    for write in writes:
        with pytest.raises(WorkspaceError, match="workspace 'docs' is read-only"):
            write()
    assert (layout / "readme.md").read_text() == "# Hello\n" and not (layout / "new.md").exists()


def test_write_create_delete(rw: Workspace, layout: Path) -> None:
    assert rw.write_file("notes/today.md", "héllo") == "Wrote 6 bytes to 'notes/today.md' in workspace 'scratch'."
    assert (layout / "notes" / "today.md").read_text() == "héllo"
    rw.write_file("notes/today.md", "replaced")
    assert rw.read_file("notes/today.md") == "replaced"
    assert rw.create_file("new.txt", "fresh") == "Created 'new.txt' (5 bytes) in workspace 'scratch'."
    with pytest.raises(WorkspaceError, match=r"already exists.*use write_file"):
        rw.create_file("new.txt", "again")
    assert rw.read_file("new.txt") == "fresh"
    assert rw.delete_file("new.txt") == "Deleted 'new.txt' from workspace 'scratch'."
    assert not (layout / "new.txt").exists()


def test_write_errors(rw: Workspace, layout: Path) -> None:
    with pytest.raises(WorkspaceError, match="is a folder"):
        rw.write_file("docs", "x")
    with pytest.raises(WorkspaceError, match="is a folder"):
        rw.write_file(".", "x")
    with pytest.raises(WorkspaceError, match=r"cannot write 'readme.md/child'"):
        rw.write_file("readme.md/child", "x")
    with pytest.raises(WorkspaceError, match=r"no file 'ghost.txt'"):
        rw.delete_file("ghost.txt")
    with pytest.raises(WorkspaceError, match="only files can be deleted"):
        rw.delete_file("docs")
    with pytest.raises(WorkspaceError, match="only files can be deleted"):
        rw.delete_file("docs/..")
    with pytest.raises(PathEscapeError):
        rw.write_file("../outside/secret.txt", "pwned")
    assert (layout.parent / "outside" / "secret.txt").read_text() == "outside secret"


def test_delete_removes_an_inside_link_not_its_target(rw: Workspace, layout: Path) -> None:
    (layout / "alias.txt").symlink_to(layout / "readme.md")
    rw.delete_file("alias.txt")
    assert not (layout / "alias.txt").exists() and (layout / "readme.md").exists()
    (layout / "out.txt").symlink_to(layout.parent / "outside" / "secret.txt")
    with pytest.raises(PathEscapeError):
        rw.delete_file("out.txt")


# ---- preview ---------------------------------------------------------------------------------------------


def test_preview_is_breadth_first(ws: Workspace) -> None:
    assert ws.preview() == (
        "Workspace 'docs' (read-only): Product documentation\n"
        "  docs/\n"
        "  readme.md (8 B)\n"
        "  docs/deep/\n"
        "  docs/guide.txt (10 B)\n"
        "  docs/deep/leaf.txt (4 B)"
    )


def test_preview_is_capped_with_a_marker(rw: Workspace) -> None:
    assert rw.preview(max_entries=2) == (
        "Workspace 'scratch' (writable)\n"
        "  docs/\n"
        "  readme.md (8 B)\n"
        "  [... more entries not shown; use list_directory to browse]"
    )
    assert "more entries" not in rw.preview(max_entries=5)


def test_preview_of_empty_workspace_does_not_follow_links(tmp_path: Path) -> None:
    assert Workspace(tmp_path, name="e").preview() == "Workspace 'e' (read-only)\n(empty)"
    (tmp_path / "self").symlink_to(tmp_path, target_is_directory=True)
    assert Workspace(tmp_path, name="e").preview() == "Workspace 'e' (read-only)\n  self/"


# ---- tools -----------------------------------------------------------------------------------------------


def by_name(tools: list[Tool]) -> dict[str, Tool]:
    return {t.name: t for t in tools}


async def test_read_only_workspace_gets_read_tools_only(ws: Workspace) -> None:
    tools = by_name(ws.tools())
    assert list(tools) == ["list_directory", "read_file"]
    assert tools["read_file"].parameters == {
        "type": "object",
        "properties": {
            "relative_path": {"description": "File to read, relative to the workspace root.", "type": "string"},
            "workspace": {
                "description": "Which workspace to use, one of 'docs' (Product documentation). Defaults to 'docs'.",
                "type": ["string", "null"],
                "enum": ["docs", None],
                "default": None,
            },
        },
        "required": ["relative_path"],
        "additionalProperties": False,
    }
    assert await tools["read_file"].run('{"relative_path": "docs/guide.txt"}') == "guide text"
    assert (await tools["list_directory"].run("{}")).startswith("Folder '.' in workspace 'docs'")
    assert tools["read_file"].idempotent


async def test_refusals_reach_the_model_as_tool_errors(ws: Workspace) -> None:
    read = by_name(ws.tools())["read_file"]
    with pytest.raises(ToolError, match=r"uses '..' to leave") as info:
        await read.run('{"relative_path": "../outside/secret.txt"}')
    assert isinstance(info.value.__cause__, PathEscapeError)
    with pytest.raises(ToolError, match=r"no file 'nope.txt'"):
        await read.run('{"relative_path": "nope.txt"}')


async def test_multi_workspace_dispatch(layout: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "readme.md").write_text("other readme")
    docs = Workspace(layout, name="docs")
    scratch = Workspace(other, name="scratch", writable=True)
    tools = by_name(workspace_tools([docs, scratch]))
    assert list(tools) == ["list_directory", "read_file", "write_file", "create_file", "delete_file"]
    read, write = tools["read_file"], tools["write_file"]

    assert await read.run('{"relative_path": "readme.md"}') == "# Hello\n"  # None: the first one
    assert await read.run('{"relative_path": "readme.md", "workspace": "scratch"}') == "other readme"
    assert await read.run('{"relative_path": "readme.md", "workspace": null}') == "# Hello\n"

    # Writing without a name goes to the first writable workspace, never to a read-only one.
    await write.run('{"relative_path": "out.txt", "content": "hi"}')
    assert (other / "out.txt").read_text() == "hi" and not (layout / "out.txt").exists()
    with pytest.raises(ToolError, match="workspace 'docs' is read-only; writable workspaces: 'scratch'"):
        await write.run('{"relative_path": "out.txt", "content": "hi", "workspace": "docs"}')
    with pytest.raises(ToolError, match="workspace 'docs' is read-only"):
        await tools["delete_file"].run('{"relative_path": "readme.md", "workspace": "docs"}')
    assert (layout / "readme.md").exists()

    # An unknown name: the schema's enum makes validation list the valid ones ...
    with pytest.raises(ToolArgumentError, match=r'expected one of "docs", "scratch" or null, got string "nope"'):
        await read.run('{"relative_path": "readme.md", "workspace": "nope"}')
    # ... and a call that skips validation is still refused with the valid names.
    with pytest.raises(ToolError, match="unknown workspace 'nope'; valid workspaces: 'docs', 'scratch'"):
        await read.call({"relative_path": "readme.md", "workspace": "nope"})
    assert "Defaults to 'scratch'" in write.parameters["properties"]["workspace"]["description"]


def test_workspace_tools_configuration(ws: Workspace, layout: Path) -> None:
    with pytest.raises(ConfigurationError, match="at least one"):
        workspace_tools([])
    with pytest.raises(ConfigurationError, match="two workspaces are named 'docs'"):
        workspace_tools([ws, Workspace(layout, name="docs")])
    assert len(workspace_tools([ws, Workspace(layout, name="b")])) == 2  # no writable one: no write tools


# ---- races and special files when writing -----------------------------------------------------------------


def swap_after_check(monkeypatch: pytest.MonkeyPatch, checked: str, folder: Path, target: Path) -> None:
    """Make ``folder`` a symbolic link to ``target`` right after ``checked`` is checked: a race won."""
    check = Workspace.resolve

    def resolve_then_swap(self: Workspace, relative_path: str) -> Path:
        real = check(self, relative_path)
        if os.fspath(relative_path) == checked:
            for child in folder.iterdir():
                child.unlink()
            folder.rmdir()
            folder.symlink_to(target, target_is_directory=True)
        return real

    monkeypatch.setattr(Workspace, "resolve", resolve_then_swap)


@pytest.mark.parametrize(
    ("action", "checked"), [("write", "sub/secret.txt"), ("create", "sub/new.txt"), ("delete", "sub")]
)  # delete checks the folder last
def test_a_folder_swapped_for_a_link_after_the_check_is_not_followed_out(
    rw: Workspace, layout: Path, monkeypatch: pytest.MonkeyPatch, action: str, checked: str
) -> None:
    outside = layout.parent / "outside"
    (layout / "sub").mkdir()
    (layout / "sub" / "secret.txt").write_text("inside")
    swap_after_check(monkeypatch, checked, layout / "sub", outside)
    operation = {
        "write": lambda: rw.write_file("sub/secret.txt", "pwned"),
        "create": lambda: rw.create_file("sub/new.txt", "pwned"),
        "delete": lambda: rw.delete_file("sub/secret.txt"),
    }[action]
    with pytest.raises(PathEscapeError, match="became a symbolic link"):
        operation()
    assert (outside / "secret.txt").read_text() == "outside secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_a_file_swapped_for_a_link_after_the_check_is_not_written_through(
    rw: Workspace, layout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = Workspace.resolve
    secret = layout.parent / "outside" / "secret.txt"

    def resolve_then_swap(self: Workspace, relative_path: str) -> Path:
        real = check(self, relative_path)
        (layout / "readme.md").unlink()
        (layout / "readme.md").symlink_to(secret)
        return real

    monkeypatch.setattr(Workspace, "resolve", resolve_then_swap)
    with pytest.raises(PathEscapeError, match="became a symbolic link after it was checked"):
        rw.write_file("readme.md", "pwned")
    assert secret.read_text() == "outside secret"


def test_deleting_in_a_missing_folder_says_there_is_no_such_file(rw: Workspace) -> None:
    with pytest.raises(WorkspaceError, match=r"no file 'nope/x\.txt' in workspace"):
        rw.delete_file("nope/x.txt")


def test_only_regular_files_are_written(rw: Workspace, layout: Path) -> None:
    fifo = layout / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # with a reader, a plain open would not block
    try:
        with pytest.raises(WorkspaceError, match="'pipe' is not a regular file"):
            rw.write_file("pipe", "data")
        with pytest.raises(WorkspaceError, match="already exists"):
            rw.create_file("pipe", "data")
        assert os.read(reader, 10) == b""  # nothing went through
    finally:
        os.close(reader)
    rw.delete_file("pipe")  # removing a special file is fine: it is only a name
    assert not fifo.exists()


def test_without_descriptor_relative_calls_writes_act_on_the_checked_path(
    rw: Workspace, layout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where os has no dir_fd or O_NOFOLLOW (Windows), the tools still work, with the documented gap.
    import baf.reasoning.workspace as workspace_module

    monkeypatch.setattr(workspace_module, "_RACE_FREE_WRITES", False)
    rw.write_file("new/dir/a.txt", "one")
    rw.write_file("new/dir/a.txt", "two")
    assert (layout / "new" / "dir" / "a.txt").read_text() == "two"
    with pytest.raises(WorkspaceError, match="already exists"):
        rw.create_file("new/dir/a.txt", "three")
    rw.create_file("b.txt", "made")
    assert (layout / "b.txt").read_text() == "made"
    rw.delete_file("b.txt")
    assert not (layout / "b.txt").exists()
    with pytest.raises(WorkspaceError, match=r"no file 'b\.txt'"):
        rw.delete_file("b.txt")
    with pytest.raises(WorkspaceError, match="is a folder"):
        rw.delete_file("new")
    with pytest.raises(PathEscapeError):
        rw.write_file("../outside.txt", "no")
    os.mkfifo(layout / "pipe")
    with pytest.raises(WorkspaceError, match="not a regular file"):
        rw.write_file("pipe", "data")
