"""One writing process per SQLite log: the writer lock.

SQLite would let two processes write one file (it serialises their transactions), but two baf runtimes on
one log would each take the same sessions for their own: two writers per session, each assigning seqs
from its own projection. So a store opened for writing takes an exclusive lock on a file beside the log
(``baf.db`` → ``baf.db.writer-lock``) and keeps it until it closes (then removes the file); another process
opening the log for writing is refused with :class:`~baf.errors.LogInUseError`, naming the file and the
holder (its pid, host and command line, which the holder writes into the lock file). Stores opened
read-only (``baf sessions``, ``replay``, ``log``, ``check``, ``export``) take no lock and read while the
writer runs.

The lock is ``flock(2)``: the kernel releases it when the holder exits, however it ends (kill -9
included), so a crashed process never leaves the log locked. It is the process's: several stores of one
process on the same file share it (counted), as one process runs one runtime per log. ``flock`` is used
rather than ``fcntl`` record locks, which SQLite uses on the database itself and which a process loses
when it closes any descriptor of the locked file.

Many processes over one log: use PostgreSQL (``baf serve``, docs/scaling_out.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
import threading
from pathlib import Path

from baf.errors import LogInUseError, LogStorageError

__all__ = ["WriterLock", "lock_path_of"]

# The locks this process holds, by lock file: (descriptor, stores sharing it).
_HELD: dict[Path, list[int]] = {}
_GUARD = threading.Lock()


def lock_path_of(log_path: Path) -> Path:
    """The lock file of the log at ``log_path``."""
    return log_path.with_name(f"{log_path.name}.writer-lock")


class WriterLock:
    """This process's claim to write the log at ``log_path``; :meth:`acquire` once, :meth:`release` once."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.path = lock_path_of(log_path)
        self._held = False

    def acquire(self) -> None:
        """Take the lock, or raise ``LogInUseError`` if another process holds it."""
        if self._held:
            return
        with _GUARD:
            shared = _HELD.get(self.path)
            if shared is not None:
                shared[1] += 1
                self._held = True
                return
            fd = self._lock_file()
            with contextlib.suppress(OSError):  # who holds it, for the next process's message
                os.ftruncate(fd, 0)
                os.pwrite(fd, _holder_text().encode("utf-8", "replace"), 0)
            _HELD[self.path] = [fd, 1]
            self._held = True

    def _lock_file(self) -> int:
        """A descriptor of the lock file, locked. The holder removes the file when it lets go, so a lock
        taken on a file that is no longer at the path (removed meanwhile) is let go and taken again."""
        for _ in range(100):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise LogStorageError(self.log_path, f"cannot open its writer lock {self.path}: {exc}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise LogInUseError(self.log_path, holder) from None
            except OSError as exc:
                os.close(fd)
                raise LogStorageError(self.log_path, f"cannot lock {self.path}: {exc}") from exc
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)
        raise LogStorageError(self.log_path, f"cannot lock {self.path}: it keeps being removed")

    def release(self) -> None:
        """Give the lock up (the last store of this process on the file lets it go)."""
        if not self._held:
            return
        self._held = False
        with _GUARD:
            shared = _HELD.get(self.path)
            if shared is None:
                return
            shared[1] -= 1
            if shared[1] == 0:
                del _HELD[self.path]
                with contextlib.suppress(OSError):  # removed while still locked: see _lock_file
                    os.unlink(self.path)
                os.close(shared[0])  # the lock goes with the descriptor


def _holder_text() -> str:
    command = " ".join(sys.argv)[:200] or "python"
    return f"pid {os.getpid()} on {socket.gethostname()} ({command})\n"


def _read_holder(fd: int) -> str | None:
    try:
        text = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return text or None
