"""Many workers, one writer per session, on a PostgreSQL log (``baf serve``; ``baf[postgres]``).

See :class:`~baf.serve.worker.Worker` and docs/scaling_out.md. ``Worker`` is imported when first asked
for: a worker process (``python -m baf.serve.process``) imports this package before anything else, and
sets up its signals first (see ``baf.serve.process.main``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from baf.serve.worker import Worker

__all__ = ["Worker"]


def __getattr__(name: str) -> Any:
    if name == "Worker":
        from baf.serve.worker import Worker

        return Worker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
