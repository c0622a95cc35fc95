"""The agent file baf's command line is importing (``baf run``, ``baf serve``, ``baf replay --rerun``).

Such a file is imported for its ``Agent``; the command then runs that agent itself. A file written to be
run with ``python file.py`` may call ``agent.run()`` at module level: imported by the command, that call
would run the agent a first time before the command's own run (``baf run``), or fail deep in asyncio
(``baf serve``, whose worker imports the file inside its event loop). :meth:`Agent.run` asks
:func:`agent_file_being_loaded` and refuses with a :class:`~baf.errors.ConfigurationError` naming the line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

__all__ = ["agent_file_being_loaded", "loading_agent_file"]

_loading: ContextVar[Path | None] = ContextVar("baf_agent_file_being_loaded", default=None)


@contextlib.contextmanager
def loading_agent_file(path: Path) -> Iterator[None]:
    """Mark ``path`` as the agent file being imported by baf's command line, for the ``with`` block."""
    token = _loading.set(path)
    try:
        yield
    finally:
        _loading.reset(token)


def agent_file_being_loaded() -> Path | None:
    """The agent file baf's command line is importing now, if any (``None`` outside such an import)."""
    return _loading.get()
