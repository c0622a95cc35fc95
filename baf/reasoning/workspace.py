"""Workspaces: folders on disk the model may browse (and, if allowed, change) through tools.

Security is the point of this module. Every path the model sends is relative to the workspace root and
is refused with :class:`~baf.errors.PathEscapeError` when it contains a NUL byte, is absolute, climbs
above the root with ``..``, or reaches outside through a symbolic link (the file itself or any folder on
the way). The check compares *resolved* real paths with :meth:`pathlib.Path.is_relative_to`, never string
prefixes, so ``/data/ws2`` is not mistaken for a part of ``/data/ws``. A symbolic link that stays inside
the root is allowed. Operations then act on the resolved path.

Writes close the gap between the check and the operation: the folders of a checked path are opened one
at a time from the root, and the file itself, without following symbolic links, so a folder or file
swapped for a link after the check (a race) is refused rather than followed out of the root. (That needs
``dir_fd`` and ``O_NOFOLLOW``: Linux, macOS, the BSDs. Elsewhere, as on Windows, writes act on the checked
path, with the gap reads have.) Only regular
files are written: a FIFO or a device is refused before it is opened for writing. Reads still act on
the resolved path, so a process that swaps a folder for a symbolic link between the check and a read
is not stopped: workspaces guard against a model's paths, not against a hostile local user who can
write inside the root.

A hard link inside the root to a file elsewhere is, to the filesystem, simply a file inside the root, so
no path check can see it. Writes therefore refuse a file with more than one link by default
(``allow_hard_links=True`` lifts that); reads of such a file are allowed.

Some names are protected: version-control metadata (``.git``, ``.hg``, ``.svn``) and ``.env`` files by
default (see ``protected``). A model that can write ``.git/config`` can make the operator's next ``git``
command run a program of its choice (``core.fsmonitor``), and ``.env`` files hold secrets. Any path with
a protected name as one of its parts (as given, or once symbolic links are resolved) is refused for
writing, creating and deleting, and for reading and listing unless ``allow_protected_reads=True``.
Writes larger than ``max_write_bytes`` are refused before anything is opened.

Workspaces are read-only unless created with ``writable=True``: a model should not be able to change
files nobody meant it to change.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import fnmatch
import os
import stat
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal, cast

from baf.errors import ConfigurationError, PathEscapeError, ToolError, WorkspaceError
from baf.reasoning.tool import Tool

__all__ = ["DEFAULT_PROTECTED", "Workspace", "WorkspaceEntry", "workspace_tools"]

EntryKind = Literal["file", "directory", "outside", "broken", "other"]
#: Names refused by default: version-control metadata (writing ``.git/config`` can run commands on the
#: operator's next ``git`` call) and ``.env`` files (they hold secrets). Glob patterns are allowed.
DEFAULT_PROTECTED: Final[tuple[str, ...]] = (".git", ".hg", ".svn", ".env", ".env.*")
# Git's heuristic: text files do not contain NUL; only the head is inspected so huge files stay cheap.
_BINARY_SNIFF_BYTES = 8192


@dataclass(frozen=True, slots=True)
class WorkspaceEntry:
    """One entry of a listed folder.

    ``kind`` is ``file``, ``directory``, ``outside`` (a symbolic link leading out of the workspace: not
    usable), ``broken`` (a symbolic link to nothing) or ``other`` (a socket, pipe or device). ``size`` is
    in bytes, for files only.
    """

    path: str
    kind: EntryKind
    size: int | None = None

    def render(self) -> str:
        """The one-line form shown to the model."""
        if self.kind == "directory":
            return f"{self.path}/"
        if self.kind == "file":
            return f"{self.path} ({_format_size(self.size or 0)})"
        notes = {
            "outside": "symbolic link leading outside the workspace, not accessible",
            "broken": "broken symbolic link",
            "other": "not a regular file",
        }
        return f"{self.path} [{notes[self.kind]}]"


def _format_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1024
        if value < 1024 or unit == "TB":
            break
    return f"{value:.1f} {unit}"


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    # Many control characters (other than whitespace, form feed, backspace, escape) also mean binary.
    controls = sum(1 for byte in head if byte < 0x20 and byte not in b"\t\n\r\f\b\x1b")
    return bool(head) and controls / len(head) > 0.1


class Workspace:
    """A folder the model can browse through :meth:`tools`.

    Args:
        path: The root folder; it must exist. Symbolic links in it are resolved once, here.
        name: How the model refers to this workspace (the ``workspace`` argument of the tools).
        description: What is in it, shown in the system prompt preview and the tool descriptions.
        writable: Allow ``write_file``, ``create_file`` and ``delete_file``. Off by default on purpose.
        max_read_bytes: ``read_file`` returns at most this many bytes, with a marker giving the full size.
        max_list_entries: ``list_directory`` shows at most this many entries, with a marker for the rest.
        max_write_bytes: Largest content (UTF-8 bytes) ``write_file`` and ``create_file`` accept (1 MiB).
        protected: File or folder names (or glob patterns, matched against each part of a path) the model
            may not write, create or delete, nor read or list unless ``allow_protected_reads``. Default:
            :data:`DEFAULT_PROTECTED` (``.git``, ``.hg``, ``.svn``, ``.env``, ``.env.*``); extend it with
            ``[*DEFAULT_PROTECTED, "*.pem"]``, or pass ``()`` to protect nothing.
        allow_protected_reads: Let the model read and list protected paths (writes stay refused).
        allow_hard_links: Let writes replace a file that has more than one hard link. Off by default: a
            hard link inside the root may lead to a file elsewhere, which no path check can see.

    Raises:
        ConfigurationError: the root does not exist or is not a folder, or a limit is not positive.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        name: str = "workspace",
        description: str | None = None,
        writable: bool = False,
        max_read_bytes: int = 200_000,
        max_list_entries: int = 1000,
        max_write_bytes: int = 1024 * 1024,
        protected: Sequence[str] = DEFAULT_PROTECTED,
        allow_protected_reads: bool = False,
        allow_hard_links: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"a workspace needs a non-empty name, got {name!r}")
        if isinstance(protected, str) or not all(isinstance(p, str) and p.strip() for p in protected):
            raise ConfigurationError(f"workspace {name!r}: protected must be a list of non-empty names")
        limits = (("max_read_bytes", max_read_bytes), ("max_list_entries", max_list_entries),
                  ("max_write_bytes", max_write_bytes))  # fmt: skip
        for label, limit in limits:
            if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
                raise ConfigurationError(f"workspace {name!r}: {label} must be a positive integer")
        try:
            root = Path(path).expanduser().resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            raise ConfigurationError(f"workspace {name!r}: root folder {os.fspath(path)!r} not found") from exc
        if not root.is_dir():
            raise ConfigurationError(f"workspace {name!r}: root {os.fspath(path)!r} is not a folder")
        self.root: Path = root
        self.name = name
        self.description = description
        self.writable = writable
        self.max_read_bytes = max_read_bytes
        self.max_list_entries = max_list_entries
        self.max_write_bytes = max_write_bytes
        self.protected: tuple[str, ...] = tuple(protected)
        self.allow_protected_reads = allow_protected_reads
        self.allow_hard_links = allow_hard_links

    def __repr__(self) -> str:
        mode = "writable" if self.writable else "read-only"
        return f"Workspace(name={self.name!r}, root={str(self.root)!r}, {mode})"

    # ---- paths ------------------------------------------------------------------------------------------

    def resolve(self, relative_path: str | os.PathLike[str]) -> Path:
        """The real path of ``relative_path`` inside the root, or :class:`~baf.errors.PathEscapeError`.

        The path need not exist (so writes can create it). ``""`` and ``"."`` are the root itself.
        Messages never show the absolute root or a link's target: they are read by the model.
        """
        text = os.fspath(relative_path)
        if not isinstance(text, str):
            raise PathEscapeError(f"workspace {self.name!r}: paths must be text, got {type(text).__name__}")
        if "\x00" in text:
            raise PathEscapeError(f"path {text!r} contains a NUL byte, which no file name can contain")
        relative = Path(text or ".")
        if relative.is_absolute():
            raise PathEscapeError(
                f"path {text!r} is absolute; give a path relative to the root of workspace {self.name!r}"
            )
        # Refuse climbing above the root even when the path would come back in: "../ws/x" says the model
        # is guessing at what lies outside, and a lexical check cannot be fooled by later filesystem state.
        depth = 0
        for part in relative.parts:
            depth = depth - 1 if part == ".." else depth + 1
            if depth < 0:
                raise PathEscapeError(f"path {text!r} uses '..' to leave workspace {self.name!r}")
        try:
            real = (self.root / relative).resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: a symbolic link loop (Python 3.11/3.12)
            raise WorkspaceError(f"path {text!r} in workspace {self.name!r} cannot be resolved: {exc}") from exc
        if not real.is_relative_to(self.root):
            raise PathEscapeError(
                f"path {text!r} goes through a symbolic link that leads outside workspace {self.name!r}; "
                "only files inside the workspace can be used"
            )
        return real

    def _display(self, real: Path) -> str:
        relative = real.relative_to(self.root).as_posix()
        return relative if relative != "." else "."

    def protected_part(self, relative_path: str | os.PathLike[str], real: Path | None = None) -> str | None:
        """The protected name on the way to ``relative_path`` (as given, or in ``real``, its path once
        symbolic links are resolved, found with :meth:`resolve` when not given), or ``None``. Names are
        compared case-insensitively, as on macOS and Windows, where ``.GIT`` is ``.git``."""
        if not self.protected:
            return None
        if real is None:
            try:
                real = self.resolve(relative_path)
            except WorkspaceError:
                real = self.root
        parts = (*Path(os.fspath(relative_path) or ".").parts, *real.relative_to(self.root).parts)
        for part in parts:
            folded = part.casefold()
            if any(fnmatch.fnmatchcase(folded, pattern.casefold()) for pattern in self.protected):
                return part
        return None

    def _refuse_protected(
        self, relative_path: str | os.PathLike[str], real: Path, action: str, *, reading: bool
    ) -> None:
        if reading and self.allow_protected_reads:
            return
        part = self.protected_part(relative_path, real)
        if part is not None:
            raise WorkspaceError(
                f"cannot {action} {os.fspath(relative_path)!r}: {part!r} is protected in workspace "
                f"{self.name!r} (version-control metadata and secrets files are off limits to the model)"
            )

    # ---- reading ----------------------------------------------------------------------------------------

    def _entry(self, directory: Path, name: str, shown_as: str) -> WorkspaceEntry:
        path = directory / name
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            return WorkspaceEntry(shown_as, "broken")
        if not real.is_relative_to(self.root):
            # Do not even stat the target: its size or type would leak what lies outside.
            return WorkspaceEntry(shown_as, "outside")
        try:
            info = real.stat()
        except OSError:
            return WorkspaceEntry(shown_as, "broken")
        if stat.S_ISDIR(info.st_mode):
            return WorkspaceEntry(shown_as, "directory")
        if stat.S_ISREG(info.st_mode):
            return WorkspaceEntry(shown_as, "file", info.st_size)
        return WorkspaceEntry(shown_as, "other")

    def _sorted_names(self, directory: Path) -> list[str]:
        """Names in ``directory``, folders first, then by name; cheap (no resolving) so huge folders work."""
        with os.scandir(directory) as scan:
            keyed = []
            for item in scan:
                try:
                    is_dir = item.is_dir()
                except OSError:
                    is_dir = False
                keyed.append((not is_dir, item.name.casefold(), item.name))
        return [name for _, _, name in sorted(keyed)]

    def _directory(self, relative_path: str | os.PathLike[str]) -> Path:
        directory = self.resolve(relative_path)
        self._refuse_protected(relative_path, directory, "list", reading=True)
        shown = os.fspath(relative_path) or "."
        if not directory.exists():
            raise WorkspaceError(f"no folder {shown!r} in workspace {self.name!r}")
        if not directory.is_dir():
            raise WorkspaceError(f"{shown!r} in workspace {self.name!r} is a file; use read_file to read it")
        return directory

    def entries(self, relative_path: str | os.PathLike[str] = ".") -> list[WorkspaceEntry]:
        """Every entry of a folder (folders first, then by name), with paths relative to the root."""
        directory = self._directory(relative_path)
        prefix = "" if directory == self.root else self._display(directory) + "/"
        try:
            names = self._sorted_names(directory)
        except OSError as exc:
            raise WorkspaceError(f"cannot list {self._display(directory)!r}: {exc.strerror}") from exc
        return [self._entry(directory, name, prefix + name) for name in names]

    def list_directory(self, relative_path: str | os.PathLike[str] = ".") -> str:
        """The folder's entries as text for the model: folders end in ``/``, files show their size.

        At most ``max_list_entries`` entries are shown; a closing line says how many were left out.
        """
        directory = self._directory(relative_path)
        shown = self._display(directory)
        try:
            names = self._sorted_names(directory)
        except OSError as exc:
            raise WorkspaceError(f"cannot list {shown!r}: {exc.strerror}") from exc
        if not names:
            return f"Folder {shown!r} in workspace {self.name!r} is empty."
        prefix = "" if directory == self.root else shown + "/"
        visible = names[: self.max_list_entries]
        lines = [f"Folder {shown!r} in workspace {self.name!r} ({len(names)} entries):"]
        lines += [self._entry(directory, name, prefix + name).render() for name in visible]
        if len(names) > len(visible):
            lines.append(f"[... {len(names) - len(visible)} more entries not shown]")
        return "\n".join(lines)

    def read_file(self, relative_path: str | os.PathLike[str]) -> str:
        """The text of a file, decoded as UTF-8 (undecodable bytes become U+FFFD).

        A file over ``max_read_bytes`` is cut there, ending with a marker that gives its full size.

        Raises:
            WorkspaceError: no such file, a folder, not a regular file, a binary file, or a protected path.
        """
        path = self.resolve(relative_path)
        self._refuse_protected(relative_path, path, "read", reading=True)
        shown = os.fspath(relative_path)
        try:
            info = path.stat()
        except FileNotFoundError:
            raise WorkspaceError(f"no file {shown!r} in workspace {self.name!r}") from None
        except OSError as exc:
            raise WorkspaceError(f"cannot read {shown!r}: {exc.strerror}") from exc
        if stat.S_ISDIR(info.st_mode):
            raise WorkspaceError(f"{shown!r} is a folder; use list_directory to see what it holds")
        if not stat.S_ISREG(info.st_mode):
            # A pipe or device could block forever or never end.
            raise WorkspaceError(f"{shown!r} is not a regular file and cannot be read")
        try:
            with path.open("rb") as handle:
                data = handle.read(self.max_read_bytes + 1)  # one extra byte tells whether it was cut
        except OSError as exc:
            raise WorkspaceError(f"cannot read {shown!r}: {exc.strerror}") from exc
        if _looks_binary(data[:_BINARY_SNIFF_BYTES]):
            raise WorkspaceError(
                f"{shown!r} looks like a binary file ({_format_size(info.st_size)}); only text files can be read"
            )
        truncated = len(data) > self.max_read_bytes
        data = data[: self.max_read_bytes]
        # An incremental decoder holds back a multi-byte character cut at the limit instead of mangling it.
        decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        text = decoder.decode(data, final=not truncated)
        if truncated:
            size = max(info.st_size, len(data) + 1)
            text += (
                f"\n\n[truncated: showing the first {self.max_read_bytes:,} bytes of {shown!r}, "
                f"which is {size:,} bytes in total]"
            )
        return text

    # ---- writing ----------------------------------------------------------------------------------------

    def _require_writable(self, action: str) -> None:
        if not self.writable:
            raise WorkspaceError(f"workspace {self.name!r} is read-only; cannot {action}")

    def _writable_target(self, relative_path: str | os.PathLike[str], action: str, data: bytes) -> Path:
        self._require_writable(action)
        if len(data) > self.max_write_bytes:
            raise WorkspaceError(
                f"cannot {action} {os.fspath(relative_path)!r}: {len(data):,} bytes is over the limit of "
                f"{self.max_write_bytes:,} bytes per write in workspace {self.name!r}; nothing was written"
            )
        path = self.resolve(relative_path)
        self._refuse_protected(relative_path, path, action, reading=False)
        if path == self.root or path.is_dir():
            raise WorkspaceError(f"{os.fspath(relative_path)!r} is a folder; cannot {action} it")
        return path

    def _open_folder(self, folder: Path, create: bool) -> int:
        """A descriptor of ``folder`` (resolved, inside the root), opened one name at a time from the root
        without following a symbolic link; ``create`` makes missing folders on the way."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in folder.relative_to(self.root).parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, dir_fd=fd)
                try:
                    inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except NotADirectoryError:  # what Linux says for a link here, as for a file
                    if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
                    raise
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_for_writing(self, path: Path, shown: str, exclusive: bool) -> BinaryIO:
        """``path`` (resolved by :meth:`resolve`) opened to write, emptied, creating missing folders.

        resolve() checked the path, but a folder or the file may be swapped for a symbolic link before it
        is used: opening without following links refuses the swap instead of writing outside the root.
        """
        if not _RACE_FREE_WRITES:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not exclusive:
                with contextlib.suppress(FileNotFoundError):
                    info = path.lstat()
                    _require_regular(info, shown)
                    self._refuse_hard_link(info, shown)
            return path.open("xb" if exclusive else "wb")
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        folder = self._open_folder(path.parent, create=True)
        try:
            if not exclusive:  # O_EXCL refuses whatever exists, and says so
                with contextlib.suppress(FileNotFoundError):
                    _require_regular(os.stat(path.name, dir_fd=folder, follow_symlinks=False), shown)
            # O_NONBLOCK: should a FIFO appear after the check, opening it must not wait for a reader.
            fd = os.open(path.name, flags | (os.O_EXCL if exclusive else 0), 0o666, dir_fd=folder)
        finally:
            os.close(folder)
        try:
            info = os.fstat(fd)
            _require_regular(info, shown)
            self._refuse_hard_link(info, shown)
            os.set_blocking(fd, True)
            os.ftruncate(fd, 0)  # not O_TRUNC: nothing is touched before it is known to be a regular file
            return os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            raise

    def _refuse_hard_link(self, info: os.stat_result, shown: str) -> None:
        """A file with more than one link may be a file outside the root, reached through a hard link."""
        if info.st_nlink > 1 and not self.allow_hard_links:
            raise WorkspaceError(
                f"cannot write {shown!r}: it has {info.st_nlink} hard links, so it may also be a file outside "
                f"workspace {self.name!r}; nothing was changed"
            )

    def write_file(self, relative_path: str | os.PathLike[str], content: str) -> str:
        """Write ``content`` (UTF-8) to a file, replacing it if it exists and creating missing folders.

        Raises:
            WorkspaceError: the workspace is read-only, or the path is a folder, not a regular file,
                protected, a file with several hard links, or cannot be written; or ``content`` is over
                ``max_write_bytes``. PathEscapeError: a folder or the file became a symbolic link meanwhile.
        """
        data = content.encode("utf-8")
        path = self._writable_target(relative_path, "write", data)
        shown = os.fspath(relative_path)
        try:
            with self._open_for_writing(path, shown, exclusive=False) as handle:
                handle.write(data)
        except OSError as exc:
            raise _write_error(exc, shown, "write") from exc
        return f"Wrote {len(data):,} bytes to {self._display(path)!r} in workspace {self.name!r}."

    def create_file(self, relative_path: str | os.PathLike[str], content: str = "") -> str:
        """Create a new file with ``content``; refuse if anything already exists at that path.

        Raises:
            WorkspaceError: the workspace is read-only, or the file exists, or the path is protected, or
                ``content`` is over ``max_write_bytes``, or it cannot be written.
        """
        data = content.encode("utf-8")
        path = self._writable_target(relative_path, "create", data)
        shown = os.fspath(relative_path)
        try:
            # O_EXCL: existence check and creation are one step (and an existing link is not followed).
            with self._open_for_writing(path, shown, exclusive=True) as handle:
                handle.write(data)
        except FileExistsError:
            raise WorkspaceError(
                f"{shown!r} already exists in workspace {self.name!r}; use write_file to replace it"
            ) from None
        except OSError as exc:
            raise _write_error(exc, shown, "create") from exc
        return f"Created {self._display(path)!r} ({len(data):,} bytes) in workspace {self.name!r}."

    def delete_file(self, relative_path: str | os.PathLike[str]) -> str:
        """Delete a file. A symbolic link (inside the workspace) is removed itself, not its target.

        Raises:
            WorkspaceError: the workspace is read-only, or there is no such file, or it is a folder, or
                the path is protected.
        """
        self._require_writable("delete")
        shown = os.fspath(relative_path)
        real = self.resolve(relative_path)  # refuses every escape, including a link that points outside
        self._refuse_protected(relative_path, real, "delete", reading=False)
        relative = Path(shown or ".")
        if relative.name in ("", ".", ".."):
            raise WorkspaceError(f"{shown!r} is a folder; only files can be deleted")
        entry = self.resolve(relative.parent) / relative.name
        try:
            self._remove(entry, shown)
        except FileNotFoundError:
            raise WorkspaceError(f"no file {shown!r} in workspace {self.name!r}") from None
        except OSError as exc:
            raise _write_error(exc, shown, "delete") from exc
        return f"Deleted {self._display(entry)!r} from workspace {self.name!r}."

    def _remove(self, entry: Path, shown: str) -> None:
        """Remove the file (or link: never its target) ``entry``, whose folder :meth:`resolve` checked.

        The name is removed from its folder as opened from the root, so a folder swapped for a symbolic
        link since the check cannot make this delete a file outside the root.
        """
        if not _RACE_FREE_WRITES:
            if stat.S_ISDIR(entry.lstat().st_mode):
                raise WorkspaceError(f"{shown!r} is a folder; only files can be deleted")
            entry.unlink()
            return
        folder = self._open_folder(entry.parent, create=False)
        try:
            if stat.S_ISDIR(os.stat(entry.name, dir_fd=folder, follow_symlinks=False).st_mode):
                raise WorkspaceError(f"{shown!r} is a folder; only files can be deleted")
            os.unlink(entry.name, dir_fd=folder)
        finally:
            os.close(folder)

    # ---- prompt and tools -------------------------------------------------------------------------------

    def preview(self, max_entries: int = 50) -> str:
        """A short listing for the system prompt: name, mode, description, then entries breadth-first.

        Top-level entries come first so a capped preview still shows the shape of the workspace. Symbolic
        links to folders are listed but not entered (they could loop).
        """
        mode = "writable" if self.writable else "read-only"
        header = f"Workspace '{self.name}' ({mode})" + (f": {self.description}" if self.description else "")
        found: list[str] = []
        pending: deque[Path] = deque([self.root])
        more = False
        # Walking on after the cap (until one more entry turns up) makes the "more" marker exact.
        while pending and not more:
            directory = pending.popleft()
            prefix = "" if directory == self.root else self._display(directory) + "/"
            try:
                names = self._sorted_names(directory)
            except OSError:
                names = [""]  # stands for the folder itself, reported as unreadable below
            for name in names:
                if len(found) >= max_entries:
                    more = True
                    break
                if not name:
                    found.append(f"{prefix or './'} [cannot be listed]")
                    continue
                entry = self._entry(directory, name, prefix + name)
                found.append(entry.render())
                # Protected folders (.git) are shown, not entered: their insides are no business of the model.
                enter = self.allow_protected_reads or self.protected_part(prefix + name) is None
                if entry.kind == "directory" and enter and not (directory / name).is_symlink():
                    pending.append(directory / name)
        if not found:
            return f"{header}\n(empty)"
        lines = [header, *(f"  {line}" for line in found)]
        if more:
            lines.append("  [... more entries not shown; use list_directory to browse]")
        return "\n".join(lines)

    def tools(self) -> list[Tool]:
        """The tools for this workspace alone: ``list_directory`` and ``read_file``, plus ``write_file``,
        ``create_file`` and ``delete_file`` when writable. Same as ``workspace_tools([self])``."""
        return workspace_tools([self])


# Opening relative to a folder's descriptor without following links (Linux, macOS, the BSDs) is what
# keeps writes from being raced out of the root. Where it is missing (Windows), writes act on the checked
# path, with the check-then-use gap the module docstring describes for reads.
_RACE_FREE_WRITES: Final = (
    hasattr(os, "O_NOFOLLOW")
    and hasattr(os, "O_DIRECTORY")
    and {os.open, os.mkdir, os.stat, os.unlink} <= os.supports_dir_fd
)


def _require_regular(info: os.stat_result, shown: str) -> None:
    """Refuse to write anything but a regular file: a FIFO would block, a device act. A symbolic link
    here was not there when the path was checked (it was resolved): a swap, refused as an escape."""
    if stat.S_ISLNK(info.st_mode):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), shown)
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise WorkspaceError(f"{shown!r} is {kind}; only regular files can be written")


def _write_error(exc: OSError, shown: str, action: str) -> WorkspaceError:
    """``exc`` from writing, creating or deleting ``shown`` as the error the model reads."""
    if exc.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW met a link where the check saw none (BSD: EMLINK)
        return PathEscapeError(
            f"cannot {action} {shown!r}: a folder or file on its path became a symbolic link after it was "
            "checked; nothing was changed"
        )
    return WorkspaceError(f"cannot {action} {shown!r}: {exc.strerror}")


def _choices(spaces: Sequence[Workspace]) -> str:
    # One line per docstring argument: a description's own line breaks would end the Args entry.
    return ", ".join(
        f"'{ws.name}'" + (f" ({' '.join(ws.description.split())})" if ws.description else "") for ws in spaces
    )


def workspace_tools(workspaces: Sequence[Workspace]) -> list[Tool]:
    """One set of file tools for several workspaces, picking one by the ``workspace`` argument.

    ``workspace`` may be left out: reading tools then use the first workspace, writing tools the first
    writable one. An unknown name is refused with a :class:`~baf.errors.ToolError` that lists the valid
    ones. The writing tools exist only when at least one workspace is writable, and refuse a read-only
    workspace named explicitly. Refusals (a path escape, a missing file) reach the model as a
    :class:`~baf.errors.ToolError` carrying the workspace's message.

    Raises:
        ConfigurationError: no workspaces, or two with the same name.
    """
    spaces = list(workspaces)
    if not spaces:
        raise ConfigurationError("workspace_tools needs at least one workspace")
    by_name: dict[str, Workspace] = {}
    for space in spaces:
        if space.name in by_name:
            raise ConfigurationError(f"two workspaces are named {space.name!r}; names must be unique")
        by_name[space.name] = space
    writable = [space for space in spaces if space.writable]
    valid = ", ".join(f"'{name}'" for name in by_name)

    def pick(workspace: str | None, write: bool) -> Workspace:
        if workspace is None:
            return writable[0] if write and writable else spaces[0]
        space = by_name.get(workspace)
        if space is None:
            raise ToolError(f"unknown workspace {workspace!r}; valid workspaces: {valid}")
        if write and not space.writable:
            names = ", ".join(f"'{ws.name}'" for ws in writable) or "none"
            raise ToolError(f"workspace {space.name!r} is read-only; writable workspaces: {names}")
        return space

    def run(workspace: str | None, write: bool, operation: Callable[[Workspace], str]) -> str:
        space = pick(workspace, write)
        try:
            return operation(space)
        except WorkspaceError as exc:
            # A refusal is an answer for the model, not a crash of the tool: keep the message as is.
            raise ToolError(str(exc)) from exc

    def list_directory(relative_path: str = ".", workspace: str | None = None) -> str:
        return run(workspace, False, lambda space: space.list_directory(relative_path))

    def read_file(relative_path: str, workspace: str | None = None) -> str:
        return run(workspace, False, lambda space: space.read_file(relative_path))

    def write_file(relative_path: str, content: str, workspace: str | None = None) -> str:
        return run(workspace, True, lambda space: space.write_file(relative_path, content))

    def create_file(relative_path: str, content: str = "", workspace: str | None = None) -> str:
        return run(workspace, True, lambda space: space.create_file(relative_path, content))

    def delete_file(relative_path: str, workspace: str | None = None) -> str:
        return run(workspace, True, lambda space: space.delete_file(relative_path))

    read_about = f"workspace: Which workspace to use, one of {_choices(spaces)}. Defaults to '{spaces[0].name}'."
    list_directory.__doc__ = f"""List the files and folders at a path in a workspace.

        Folders end with '/'; files show their size.

        Args:
            relative_path: Folder to list, relative to the workspace root; '.' is the root.
            {read_about}
        """
    read_file.__doc__ = f"""Read a text file from a workspace.

        Long files are cut, with a note giving their full size. Binary files cannot be read.

        Args:
            relative_path: File to read, relative to the workspace root.
            {read_about}
        """
    # The enum lets the model see the valid names; pick() still guards calls that skip validation.
    choice = cast(Any, Literal)[tuple(by_name)] | None
    tools = [
        Tool(_annotated(list_directory, choice), idempotent=True),
        Tool(_annotated(read_file, choice), idempotent=True),
    ]
    if not writable:
        return tools
    write_about = (
        f"workspace: Which workspace to change; writable ones: {_choices(writable)}. Defaults to '{writable[0].name}'."
    )
    write_file.__doc__ = f"""Write a text file in a workspace, replacing it if it exists.

        Missing folders on the way are created.

        Args:
            relative_path: File to write, relative to the workspace root.
            content: The full new text of the file.
            {write_about}
        """
    create_file.__doc__ = f"""Create a new text file in a workspace; fails if the file already exists.

        Args:
            relative_path: File to create, relative to the workspace root.
            content: The text of the new file.
            {write_about}
        """
    delete_file.__doc__ = f"""Delete a file from a workspace (folders cannot be deleted).

        Args:
            relative_path: File to delete, relative to the workspace root.
            {write_about}
        """
    tools += [
        Tool(_annotated(write_file, choice), idempotent=True),
        Tool(_annotated(create_file, choice)),
        Tool(_annotated(delete_file, choice)),
    ]
    return tools


def _annotated(fn: Callable[..., str], workspace_type: Any) -> Callable[..., str]:
    fn.__annotations__["workspace"] = workspace_type
    return fn
