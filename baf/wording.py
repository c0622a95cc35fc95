"""How baf words a count in what it tells people: ``1 record``, ``0 records``, ``2,500 records``.

The bottom layer, below ``baf.errors`` (which uses it; it imports nothing of baf), so that every package
words counts the same way.
"""

from __future__ import annotations

__all__ = ["agreeing", "counted"]


def agreeing(count: int, singular: str, plural: str) -> str:
    """The form that agrees with ``count``: ``singular`` for exactly one, ``plural`` otherwise (zero too):
    ``agreeing(n, "is", "are")``, ``agreeing(n, "it takes", "they take")``."""
    return singular if count == 1 else plural


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` (with thousands separators) and ``noun``, made plural unless ``count`` is exactly one by
    adding an ``s``, or as ``plural`` says for a noun that does not take one (``counted(2, "entry",
    "entries")``)."""
    return f"{count:,} {agreeing(count, noun, plural or f'{noun}s')}"
