"""Many workers, one writer per session, on a PostgreSQL log (``baf serve``; ``baf[postgres]``).

See :class:`~baf.serve.worker.Worker` and docs/scaling_out.md.
"""

from baf.serve.worker import Worker

__all__ = ["Worker"]
