"""The kernel's recorder for a session: records through the session, commits and streams through the
runtime's side of it (``baf.core.session.runtime_side``), which ``baf.reasoning`` cannot import."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from baf.core.session import runtime_side
from baf.log.record import Record
from baf.reasoning.effects import EffectSource
from baf.reasoning.recorder import Recorder

if TYPE_CHECKING:
    from baf.core.session import Session

__all__ = ["session_recorder"]


def session_recorder(session: Session, prefix: Sequence[Record] = (), source: EffectSource | None = None) -> Recorder:
    """A :class:`~baf.reasoning.recorder.Recorder` writing into ``session`` (skipping ``prefix``, served
    by ``source`` when given: see :mod:`baf.reasoning.recorder`)."""
    return Recorder(session, prefix, source, live=runtime_side(session))
