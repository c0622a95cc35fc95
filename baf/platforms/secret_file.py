"""A platform's signing secret kept in a file beside the log, so that what it signed survives a restart.

The WebSocket platform signs resume tokens. A secret made fresh in every process would void every token at
each restart, and with them every browser's conversation. So, unless the user passes one, the secret is made
once and kept in a file next to the log (``baf.db`` → ``baf.db.websocket-secret``), readable by its owner
only (mode 0600). Anyone who can read it can forge tokens for any session of that log: it is as sensitive
as the log itself, and a file others can read, or one another user owns (and so may have written), is
refused rather than used.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from baf.errors import ConfigurationError

__all__ = ["load_or_create_secret", "secret_path_beside"]

_SECRET_BYTES = 32


def secret_path_beside(log_path: str | os.PathLike[str], purpose: str) -> Path:
    """Where the secret for ``purpose`` (e.g. ``"websocket"``) of the log at ``log_path`` is kept."""
    path = Path(log_path)
    return path.with_name(f"{path.name}.{purpose}-secret")


def load_or_create_secret(path: Path) -> bytes:
    """The secret kept in ``path``; made (32 random bytes, hex, mode 0600) if there is none yet.

    Two processes starting together agree on one secret: a new one is written to a private temporary
    file and linked into place only if nothing is there yet, so a reader never sees a half-written file.

    Raises:
        ConfigurationError: the file belongs to another user, can be read by others than its owner, or does
            not hold a secret.
    """
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    fresh = secrets.token_hex(_SECRET_BYTES).encode("ascii")
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(fresh + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another process was first: its secret wins
            os.link(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return _read(path)


def _read(path: Path) -> bytes:
    with path.open("rb") as handle:
        info = os.fstat(handle.fileno())
        if os.name == "posix" and info.st_uid != os.geteuid():
            # Planted by another user (a log in a shared folder such as /tmp): they would know the secret.
            raise ConfigurationError(
                f"the secret file {path} belongs to another user (uid {info.st_uid}); whoever made it may know "
                "the secret and resume any conversation: delete it to make a new one (open conversations then "
                "start afresh), or keep the log in a folder of your own"
            )
        if os.name == "posix" and info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigurationError(
                f"the secret file {path} can be read by others (mode {stat.S_IMODE(info.st_mode):o}); anyone "
                f"who can read it can resume any conversation: run 'chmod 600 {path}', or delete it to make a "
                "new one (open conversations then start afresh)"
            )
        secret = handle.read().strip()
    if len(secret) < 32:
        raise ConfigurationError(
            f"the secret file {path} does not hold a secret (at least 32 characters); delete it to make a new one"
        )
    return secret
