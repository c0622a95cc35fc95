"""The kernel's view of a session: where a reasoning loop writes its records, and how a resumed loop
skips the records it had already written before a crash.

``baf.reasoning`` does not import sessions (they live in ``baf.core``, above it). A loop writes through
a :class:`Recorder` wrapping whatever session it was given (anything with ``record``, ``record_error``,
``reply``, ``set`` and an ``agent.redactor``, as a :class:`~baf.core.session.Session` has) and the
runtime's side of it (``commit``, ``queue_platform_call``: ``baf.library.state.recording``), or
nothing: a pattern run outside a session records nothing.

**Resume by replay.** A loop killed mid-run is resumed by running it again from its start with the
recorded model responses and tool results served from the log (:class:`~baf.reasoning.resume.ResumeEffects`).
Loops are deterministic given what the model and the tools returned, so the run writes the same
records again, in the same order, up to the point of the crash. The recorder holds those records as
its *prefix*: each write is checked against the next recorded one (same kind; for a step, same step
kind) and not written again; once the prefix is used up the loop writes as usual. A write that does not
match means the code no longer does what it did before the restart: :class:`~baf.errors.ResumeError`.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Sequence
from typing import Any

from baf.errors import ResumeError
from baf.log.record import Record, RecordKind
from baf.reasoning.effects import EffectSource, current_effect_source
from baf.reasoning.streaming import TextDeltas

__all__ = ["Recorder"]


class Recorder:
    """Writes a loop's records into ``session`` (if any), skipping ``prefix`` (see the module docstring).

    ``source`` answers model turns and tool calls instead of the live model and tools; by default the
    one a re-run installed (:func:`~baf.reasoning.effects.current_effect_source`), if any.

    One recorder serves one invocation: the loop and every run nested in it (a pipeline's stages) write
    through it, and draw their run numbers from it (:meth:`next_run`), so a replay numbers them alike.
    """

    def __init__(
        self,
        session: Any = None,
        prefix: Sequence[Record] = (),
        source: EffectSource | None = None,
        *,
        live: Any = None,
    ) -> None:
        self.session = session
        # The runtime's side of the session (``commit``, ``queue_platform_call``); see
        # ``baf.library.state.recording.session_recorder``. Records go straight to it when given: the
        # session's own ``record`` only forwards there.
        self._live = live
        self._writes = live if live is not None else session
        #: Answers model turns and tool calls instead of the model and the tools (resume, re-run), if set.
        self.source = source if source is not None else current_effect_source()
        self._prefix = deque(r for r in prefix if r.kind != RecordKind.STEP_RESUMED)
        self._runs = 0
        self._redactor = getattr(getattr(session, "agent", None), "redactor", None)
        if not self._prefix:
            self._go_direct()

    def _go_direct(self) -> None:
        """Once nothing is left to skip, ``record``, ``stream`` and ``commit`` are the runtime's own
        methods (instance attributes shadowing these): a loop writes ~10 records a turn, and the
        wrappers cost about 3 µs of a ~130 µs turn (``bench/ab_kernel.py``)."""
        if self._live is not None:
            self.record = self._live.record  # type: ignore[method-assign]
            self.stream = self._live.queue_platform_call  # type: ignore[method-assign]
            self.record_shown = self._live.record_shown  # type: ignore[method-assign]
            self.commit = self._live.commit  # type: ignore[method-assign]

    @property
    def replaying(self) -> bool:
        """True while the loop is still writing records the log already holds."""
        return bool(self._prefix)

    def next_run(self) -> int:
        """A number for a new loop run of this invocation (0 for the first)."""
        run, self._runs = self._runs, self._runs + 1
        return run

    def redact(self, text: str) -> str:
        """``text`` with the agent's secrets replaced (for text about to be shortened: a secret cut in
        half is no longer recognised when the record is written)."""
        return self._redactor.redact_text(text) if self._redactor is not None else text

    def _skip(self, kind: str, data: dict[str, Any] | None = None) -> Record | None:
        """The recorded record this write repeats, if the loop is still replaying its prefix.

        Records the loop does not write itself (a variable a tool set, an error a platform callback
        raised) may sit between the loop's own in the prefix: they are passed over."""
        while self._prefix:
            recorded = self._prefix[0]
            if recorded.kind == kind and (
                kind != RecordKind.REASONING_STEP or data is None or recorded.data.get("kind") == data.get("kind")
            ):
                self._prefix.popleft()
                if not self._prefix:
                    self._go_direct()
                return recorded
            if recorded.kind in _LOOP_KINDS:
                raise ResumeError(
                    f"cannot resume session {getattr(self.session, 'id', '?')!r}: before the restart this loop "
                    f"wrote {_describe(recorded.kind, recorded.data)} at seq {recorded.seq}, now it writes "
                    f"{_describe(kind, data)}; its code or configuration changed"
                )
            self._prefix.popleft()
        return None

    def record(self, kind: str, data: dict[str, Any]) -> None:
        """Append a record (durable at the next commit), unless it was recorded before the restart."""
        if self._prefix and self._skip(kind, data) is not None:
            return
        if self._writes is not None:
            self._writes.record(kind, data)

    def record_shown(self, kind: str, data: dict[str, Any], method: str, *payload: Any) -> None:
        """:meth:`record`, then :meth:`stream` ``method`` with ``payload``, which shows what ``data`` holds
        (a reasoning step, a task list): the runtime redacts them once, for both."""
        if self._prefix and self._skip(kind, data) is not None:
            self.stream(method, *payload)
            return
        if self._live is not None:
            self._live.record_shown(kind, data, method, *payload)
        elif self._writes is not None:
            self._writes.record(kind, data)

    def record_error(self, source: str, exc: BaseException, **details: Any) -> None:
        """Record an ``error`` (with the traceback), unless recorded before the restart."""
        if self._skip(RecordKind.ERROR) is None and self.session is not None:
            self.session.record_error(source, exc, **details)

    def reply(self, text: str) -> None:
        """Reply to the user (recorded first), unless the reply was recorded before the restart."""
        if self._skip(RecordKind.REPLY) is None and self.session is not None:
            self.session.reply(text)

    def set(self, name: str, value: Any) -> None:
        """Set a session variable, unless it was set before the restart."""
        if self._skip(RecordKind.VARIABLE_SET) is None and self.session is not None:
            self.session.set(name, value)

    def stream(self, method: str, *payload: Any) -> None:
        """Queue ``platform.<method>(session, *payload)`` for after the next commit. Nothing while
        replaying: those steps were streamed (or were due) before the restart."""
        if not self._prefix and self._live is not None:
            self._live.queue_platform_call(method, *payload)

    def text_deltas(self) -> TextDeltas | None:
        """Where a model turn's text goes while the model writes it: the session platform's
        ``reply_delta`` (see :mod:`baf.reasoning.streaming`); ``None`` without a session or a platform.
        Made right after the turn's request is recorded: its seq names the streamed answer."""
        live = self._live
        send = getattr(getattr(live, "platform", None), "reply_delta", None)
        if send is None:
            return None

        def failed(exc: BaseException) -> None:
            live.report_error("streaming a reply to the platform failed", "platform", exc)

        return TextDeltas(functools.partial(send, live.session), live.projection.last_seq, self._redactor, failed)

    async def commit(self) -> None:
        """Make what was recorded durable (and deliver what was queued)."""
        if self._live is not None:
            await self._live.commit()


# The kinds only a loop writes: one of them in the prefix where the loop now writes something else means
# the loop took another path. Any other kind may also come from a tool or a platform callback.
_LOOP_KINDS = frozenset({RecordKind.LLM_REQUEST, RecordKind.LLM_RESPONSE, RecordKind.TOOL_RESULT,
                         RecordKind.REASONING_STEP, RecordKind.TASK_LIST})  # fmt: skip


def _describe(kind: str, data: dict[str, Any] | None) -> str:
    return f"{kind} ({data.get('kind')})" if kind == RecordKind.REASONING_STEP and data else kind
