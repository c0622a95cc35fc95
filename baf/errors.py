"""Every exception baf raises, in one tree.

::

    BafError
    ├── ConfigurationError          the agent was wired wrongly (duplicate state, two initial states, ...)
    │   │                           or cannot start as set up (a platform's port is in use, ...)
    │   ├── AgentFileError          a YAML agent file is invalid; each problem names file, line and column
    │   └── MissingExtraError       a feature needs an optional extra that is not installed; says the
    │                               pip command for this install (also an ``ImportError``)
    ├── TemplateError               a YAML agent's template could not be rendered (a missing variable, an
    │                               attribute the sandbox refuses)
    ├── SessionVariableError        a session variable that cannot be stored (not JSON-serialisable)
    ├── SessionIdError              a session id that cannot be used (empty, not text, holds a secret)
    ├── SessionNotFoundError        the log has no session by that id (also a ``LookupError``)
    ├── RecordNotFoundError         the session has no record at that seq (``--at`` past its end; also a
    │                               ``LookupError``)
    ├── InvariantError              baf found its own rules broken: a bug, or a log edited by hand
    │                               (also a ``RuntimeError``)
    ├── RuntimeStoppedError         work handed to a runtime that has stopped: a sync body or tool
    │                               submitted to its thread pool after shutdown (also a ``RuntimeError``)
    ├── LogError                    the session log broke one of its guarantees
    │   ├── LogConflictError        (session_id, seq) already exists: an append never overwrites
    │   ├── CorruptRecordError      a stored record cannot be decoded; names session and seq
    │   │   └── CorruptSnapshotError  a snapshot record fails its checks or disagrees with the fold
    │   ├── UnknownRecordVersionError  a record written by a newer baf than this one
    │   ├── LogClosedError          append or read on a store that is not open
    │   ├── LogStorageError         the store's file or database failed (damaged, unreadable, disk
    │   │                           error); names the path, and the session and seq where known
    │   ├── LogReadOnlyError        append on a store opened read-only
    │   ├── LogInUseError           another process writes this log (a SQLite file's other writer; on
    │   │                           PostgreSQL, workers or a plain process); names the log and the holder
    │   └── LeaseLostError          this worker no longer owns the session (another took it over)
    ├── LLMError                    the model could not be used
    │   ├── LLMConnectionError      the server could not be reached, or its streamed answer broke off
    │   │                           (after retries)
    │   ├── LLMTimeoutError         the request took longer than its timeout (after retries)
    │   ├── LLMStatusError          a non-2xx answer after retries; ``status_code`` says which
    │   │   └── LLMRateLimitError   HTTP 429 that outlived the retries
    │   └── LLMResponseError        the answer arrived but is not a usable completion
    ├── ToolError                   a tool call that could not be carried out
    │   ├── ToolNotFoundError       the model named a tool the loop does not offer
    │   ├── ToolArgumentError       arguments that are not JSON, or do not fit the tool's schema
    │   ├── ToolTimeoutError        the tool ran past its timeout
    │   ├── ToolExecutionError      the tool itself raised; the original is ``__cause__``
    │   └── ToolServerError         the server running the tool (MCP) is not reachable or stopped mid-call
    │       └── ToolListingError    an MCP server's tool list does not follow the MCP schema
    ├── WorkspaceError              a workspace operation was refused
    │   └── PathEscapeError         a path that would leave the workspace root
    ├── ResumeError                 a loop killed mid-run cannot go on from its records: its code now
    │                               does something other than what the records say it did
    ├── ApprovalPending             not a failure: a tool call waits for a human decision, so the loop
    │                               stops here (``baf.reasoning.approval``; the state bodies catch it)
    ├── ApprovalError               an approval decision that was refused: no request for that call
    │                               waits in the session (decided already, expired, never made there)
    └── PatternError                a reasoning pattern could not finish (``baf.reasoning.patterns``)
        ├── StructuredOutputError   the model's answer does not parse into the expected model
        ├── PatternNotFoundError    no pattern registered under that name
        └── PatternLimitError       a guard stopped the run; ``partial`` holds what was done
            ├── PatternStepLimitError     max_steps ran out
            ├── PatternStepTimeoutError   a model call ran past step_timeout
            └── PatternBudgetError        the token or cost budget is spent

Framework invariants (the ``LogError`` branch) propagate: they mean the log cannot be trusted.
Everything raised by user code (a body, a tool, a platform callback) is recorded as an ``error``
record and contained; the session goes on.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from baf.wording import counted

__all__ = [
    "AgentFileError",
    "ApprovalError",
    "ApprovalPending",
    "BafError",
    "ConfigurationError",
    "CorruptRecordError",
    "CorruptSnapshotError",
    "InvariantError",
    "LLMConnectionError",
    "LLMError",
    "LLMRateLimitError",
    "LLMResponseError",
    "LLMStatusError",
    "LLMTimeoutError",
    "LeaseLostError",
    "LogClosedError",
    "LogConflictError",
    "LogError",
    "LogInUseError",
    "LogReadOnlyError",
    "LogStorageError",
    "MissingExtraError",
    "PathEscapeError",
    "PatternBudgetError",
    "PatternError",
    "PatternLimitError",
    "PatternNotFoundError",
    "PatternStepLimitError",
    "PatternStepTimeoutError",
    "RecordNotFoundError",
    "ResumeError",
    "RuntimeStoppedError",
    "SessionIdError",
    "SessionNotFoundError",
    "SessionVariableError",
    "StructuredOutputError",
    "TemplateError",
    "ToolArgumentError",
    "ToolError",
    "ToolExecutionError",
    "ToolListingError",
    "ToolNotFoundError",
    "ToolServerError",
    "ToolTimeoutError",
    "UnknownRecordVersionError",
    "WorkspaceError",
]


class BafError(Exception):
    """Base of every exception raised by baf."""


class ConfigurationError(BafError):
    """The agent, a state or a transition was set up in a way that cannot work."""


class AgentFileError(ConfigurationError):
    """A YAML agent file that cannot be loaded. ``problems`` lists each one as ``(path, line, column,
    message)`` (line and column count from 1; ``0`` when unknown); the message shows them all."""

    def __init__(self, path: str, problems: list[tuple[str, int, int, str]]) -> None:
        self.path = path
        self.problems = list(problems)
        shown = "\n".join(f"  {path}:{line}:{column}: {message}" for _, line, column, message in self.problems)
        super().__init__(f"{path}: {counted(len(self.problems), 'problem')}\n{shown}")


class MissingExtraError(ConfigurationError, ImportError):
    """``what`` needs the optional ``extra`` (``web``, ``postgres``, ``mcp``, ...), which is not installed.

    The message gives the command that installs it for the baf being run: ``pip install -e "DIR[web]"``
    for a clone (an editable install, or run from its folder; ``".[web]"`` when run in that folder),
    ``pip install "PATH[web]"`` for one installed from a local folder or file, and
    ``pip install "baf[web]"`` otherwise. ``extra`` and ``command`` hold both parts. The command starts
    with ``pip`` when the shell's ``pip`` is the running Python's (an activated virtual environment), else
    with that Python's path and ``-m pip`` (a virtual environment's ``baf`` run by its path: the shell's
    ``pip`` would install into another Python, or be refused as PEP 668 systems refuse it).

    Left uncaught in a plain script (``python examples/websocket_agent.py``), it is shown as the one line
    ``SCRIPT: MESSAGE`` on stderr, as ``baf run`` shows it, not as a traceback through baf's imports: the
    first one made wraps ``sys.excepthook`` (every other exception still goes to the hook it wrapped).
    """

    def __init__(self, what: str, extra: str) -> None:
        self.extra = extra
        self.command = _install_command(extra)
        super().__init__(f"{what} needs the {extra!r} extra, which is not installed: {self.command}")
        _show_uncaught_in_one_line()


def _show_uncaught_in_one_line() -> None:
    """Wrap ``sys.excepthook`` (once) so that an uncaught :class:`MissingExtraError` prints one line."""
    previous = sys.excepthook
    if getattr(previous, "_baf_missing_extra", False):
        return

    def excepthook(kind: type[BaseException], error: BaseException, frames: Any) -> None:
        if not isinstance(error, MissingExtraError):
            previous(kind, error, frames)
            return
        script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] not in ("", "-c") else ""
        sys.stderr.write(f"{script}: {error}\n" if script else f"{error}\n")

    excepthook._baf_missing_extra = True  # type: ignore[attr-defined]
    sys.excepthook = excepthook


def _install_command(extra: str) -> str:
    """The pip command that adds the optional ``extra`` to the baf being run (see :class:`MissingExtraError`)."""
    target, editable = _installed_from()
    if target is None:
        return f'{_pip()} install "baf[{extra}]"'
    if editable and Path(target) == Path.cwd():
        target = "."
    return f'{_pip()} install {"-e " if editable else ""}"{target}[{extra}]"'


def _pip() -> str:
    """How to run the pip of the Python running baf: ``pip`` if the shell finds that one first, else
    ``PYTHON -m pip`` (relative to the working folder when it is inside it)."""
    if not sys.executable:  # an embedded interpreter: no path to name
        return "pip"
    python = Path(os.path.abspath(sys.executable))  # not resolved: a venv's python is a link out of it
    found = shutil.which("pip")
    if found is not None and Path(os.path.abspath(found)).parent == python.parent:
        return "pip"
    shown = os.path.relpath(python) if python.is_relative_to(Path.cwd()) else str(python)
    return f"{shlex.quote(shown)} -m pip"


def _installed_from() -> tuple[str | None, bool]:
    """Where this baf comes from: its source tree and ``True`` when it runs from one (an editable install of
    a clone, or a clone on ``sys.path``); the local folder or file pip installed it from (``direct_url.json``,
    PEP 610) and ``False``; ``(None, False)`` for a package index (or unknown), where ``baf`` names it."""
    source = Path(__file__).resolve().parent.parent
    if (source / "pyproject.toml").is_file():
        return str(source), True
    try:
        direct = json.loads(metadata.distribution("baf").read_text("direct_url.json") or "null")
    except (metadata.PackageNotFoundError, ValueError):
        return None, False
    if not isinstance(direct, dict) or not str(direct.get("url", "")).startswith("file:"):
        return None, False
    path = unquote(urlsplit(str(direct["url"])).path)
    if os.name == "nt" and path.startswith("/") and path[2:3] == ":":
        path = path[1:]  # file:///C:/... is C:/...
    return path, False


class TemplateError(BafError):
    """A template of a YAML agent could not be rendered: it read a variable that is not set, or
    something the sandbox refuses. Raised in a body, it is recorded and contained like any body error."""


class SessionVariableError(BafError, TypeError):
    """A session variable value that cannot be recorded (it must be JSON-serialisable)."""


class SessionIdError(BafError, ValueError):
    """A session id that cannot be used: empty, not a string, or holding one of the agent's secrets
    (ids are stored and shown as they are, in every record, so an id must never carry a secret)."""


class SessionNotFoundError(BafError, LookupError):
    """The log holds no session with this id (``baf replay``, ``baf log``, re-run, fork)."""

    def __init__(self, session_id: str, where: str = "this log") -> None:
        super().__init__(f"session {session_id!r} has no records in {where}")
        self.session_id = session_id


class RecordNotFoundError(BafError, LookupError):
    """The session has no record at this seq: it ends before it (``baf replay --at``, ``state_at``)."""

    def __init__(self, session_id: str, seq: int, last_seq: int) -> None:
        super().__init__(f"session {session_id!r} has no record {seq}: its last record is {last_seq}")
        self.session_id, self.seq, self.last_seq = session_id, seq, last_seq


class InvariantError(BafError, RuntimeError):
    """A rule baf keeps for itself was found broken, e.g. a resumed reasoning loop whose records are in an
    order baf never writes. It means a bug in baf or a log changed by hand; it is raised, never repaired
    (inside a body, the engine records it as that body's error)."""


class RuntimeStoppedError(BafError, RuntimeError):
    """Work was handed to a runtime that has stopped: a sync body or tool submitted to its thread pool
    after shutdown (an agent stopped while a session still had a step to take)."""


class LogError(BafError):
    """The session log could not keep one of its guarantees."""


class LogConflictError(LogError):
    """An append would reuse an existing ``(session_id, seq)``; nothing was written."""

    def __init__(self, session_id: str, seq: int) -> None:
        super().__init__(f"session {session_id!r} already has a record at seq {seq}; the log never overwrites")
        self.session_id = session_id
        self.seq = seq


class CorruptRecordError(LogError):
    """A stored record cannot be decoded, fails its checksum, or is missing (a gap in the seqs).

    ``path`` names the store's file when the store that read it knows it (``located``).
    """

    def __init__(self, session_id: str, seq: int, reason: str, path: object = None) -> None:
        where = "" if path is None else f" of {path}"
        super().__init__(f"corrupt record in session {session_id!r} at seq {seq}{where}: {reason}")
        self.session_id = session_id
        self.seq = seq
        self.reason = reason
        self.path = path

    def located(self, path: object) -> CorruptRecordError:
        """The same error naming ``path`` (itself if it already names one), its cause kept."""
        if self.path is not None:
            return self
        located = type(self)(self.session_id, self.seq, self.reason, path)
        located.__cause__ = self.__cause__
        return located


class CorruptSnapshotError(CorruptRecordError):
    """A ``snapshot`` record that cannot be trusted: its digest, shape or seq is wrong, or it disagrees
    with the fold of the records before it. The session is then rebuilt from its records
    (``baf.log.store.load_projection``)."""


class UnknownRecordVersionError(LogError):
    """A record carries a schema version newer than this baf understands."""

    def __init__(self, session_id: str, seq: int, kind: str, version: int, supported: int) -> None:
        super().__init__(
            f"record {kind!r} in session {session_id!r} at seq {seq} has version {version}, "
            f"but this baf reads up to version {supported}; upgrade baf to read this log"
        )
        self.session_id = session_id
        self.seq = seq
        self.kind = kind
        self.version = version
        self.supported = supported


class LogClosedError(LogError):
    """The store was used after ``close()`` and not started again."""


class LogStorageError(LogError):
    """The storage under a store failed: a damaged or unreadable file, a disk error, a lock held too long.

    ``path`` is the store's file (or database); ``session_id`` and ``seq`` say where it happened when
    that can be told (``None`` otherwise). The original error is ``__cause__``.
    """

    def __init__(self, path: object, what: str, session_id: str | None = None, seq: int | None = None) -> None:
        where = "" if session_id is None else f" (session {session_id!r}" + ("" if seq is None else f" at seq {seq}")
        super().__init__(f"{path}: {what}{where}{')' if where else ''}")
        self.path = path
        self.session_id = session_id
        self.seq = seq


class LogReadOnlyError(LogError):
    """``append`` on a store opened read-only (``SQLiteLog(path, read_only=True)``); nothing was written."""


class LogInUseError(LogError):
    """A log opened for writing while another process writes it, and nothing was written.

    A SQLite log has one writing process (``baf.log.sqlite_lock``). A PostgreSQL log is written either by
    ``baf serve`` workers, each session fenced by its lease, or by one plain process (``baf run``,
    ``agent.run()``) alone (``baf.log.postgres_lock``): a plain process opening a log that workers or
    another plain process write is refused, and so is a worker opening a log a plain process writes.
    ``path`` is the log; ``holder`` says who holds it (for SQLite its pid, host and command line; for
    PostgreSQL the holding connections' names) when that could be read; ``reason``, when given, is the
    whole explanation. Reading (``read_only=True``) is never refused."""

    def __init__(self, path: object, holder: str | None = None, *, reason: str | None = None) -> None:
        who = f"by {holder}" if holder else "by another process"
        super().__init__(
            f"{path}: {reason}"
            if reason is not None
            else f"{path}: this SQLite log is already open for writing {who}; a SQLite log has one writing process "
            "(stop that one, open the log read-only, or use PostgreSQL for many workers: baf serve)"
        )
        self.path = path
        self.holder = holder


class LeaseLostError(LogError):
    """An append for a session this worker no longer owns: its lease was taken over (a newer epoch) or
    was never held. Nothing was written; the worker must drop the session (``baf.log.postgres_leases``)."""

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(f"session {session_id!r}: {reason}; nothing was written")
        self.session_id = session_id
        #: Why, without the session (``worker 'a' lost its lease (epoch 3) to another``).
        self.reason = reason


class LLMError(BafError):
    """The language model could not produce a response."""


class LLMConnectionError(LLMError):
    """The model server could not be reached, or a streamed answer broke off before it was complete."""


class LLMTimeoutError(LLMError):
    """The model did not answer within the timeout."""


class LLMStatusError(LLMError):
    """The model server answered with an error status."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


class LLMRateLimitError(LLMStatusError):
    """The model server kept answering 429 after every retry."""

    def __init__(self, message: str, status_code: int = 429) -> None:
        super().__init__(message, status_code)


class LLMResponseError(LLMError):
    """The model answered, but not with a usable completion."""


class ToolError(BafError):
    """A tool call could not be carried out. The message is what the model is shown."""


class ToolNotFoundError(ToolError):
    """The model asked for a tool that is not registered."""


class ToolArgumentError(ToolError):
    """The arguments of a tool call are not valid JSON or do not fit the tool's schema."""


class ToolTimeoutError(ToolError):
    """The tool did not finish within its timeout."""


class ToolExecutionError(ToolError):
    """The tool raised; the original exception is ``__cause__``."""


class ToolServerError(ToolError):
    """The server that runs the tool (an MCP server) could not be reached, or stopped during the call."""


class ToolListingError(ToolServerError):
    """An MCP server's tool list cannot be read: it does not follow the MCP schema. At start this stops the
    start (as a :class:`ConfigurationError` naming the server); later, the previous list stays in use."""


class WorkspaceError(BafError):
    """A workspace operation was refused."""


class PathEscapeError(WorkspaceError):
    """A path that would reach outside the workspace root."""


class ResumeError(BafError):
    """A reasoning loop interrupted by a crash could not be resumed from its records: run again over
    them, it wrote something other than what it had written before (its code or configuration changed).
    The step is closed with this error, and the user is told something went wrong."""


class ApprovalPending(BafError):
    """Not a failure: tool calls of the current model response wait for a human decision.

    The tool-call runner raises it after recording an ``approval_requested`` record per waiting call;
    the loop that ran them (the reasoning state, a pattern) ends its step there, and an
    :class:`~baf.core.events.ApprovalEvent` for the session continues it from the log
    (``docs/human_approval.md``). ``calls`` are the waiting :class:`~baf.llm.base.ToolCall` objects."""

    def __init__(self, calls: list[Any]) -> None:
        names = ", ".join(f"{call.name} ({call.id})" for call in calls)
        super().__init__(f"waiting for a human decision on {names}")
        self.calls = calls


class ApprovalError(BafError):
    """An approval decision that was refused: no request for that call waits in the session (it was
    decided already, it expired when the conversation moved on, or it was never made there), or the
    decision is malformed. Recorded as an ``error`` and shown to the sender; nothing runs."""


class PatternError(BafError):
    """A reasoning pattern (``baf.reasoning.patterns``) could not finish its run."""


class StructuredOutputError(PatternError):
    """The model's answer did not parse into the expected pydantic model, after every parse attempt.

    ``attempts`` lists why each stage of the parse cascade failed; ``text`` is the answer as received.
    """

    def __init__(self, message: str, text: str = "", attempts: list[str] | None = None) -> None:
        super().__init__(message)
        self.text = text
        self.attempts = list(attempts or [])


class PatternNotFoundError(PatternError, KeyError):
    """No pattern is registered under the requested name."""

    def __str__(self) -> str:
        # KeyError would quote the message; this error's message is meant to be read as is.
        return str(self.args[0]) if self.args else ""


class PatternLimitError(PatternError):
    """A guard ended the run early. ``partial`` is the result so far (a ``ReasoningResult``), if any."""

    def __init__(self, message: str, partial: object = None) -> None:
        super().__init__(message)
        self.partial = partial


class PatternStepLimitError(PatternLimitError):
    """The pattern used its ``max_steps`` without finishing."""


class PatternStepTimeoutError(PatternLimitError):
    """A model call of the pattern ran past ``step_timeout`` (tools past ``tool_timeout`` give the model
    an error result instead)."""


class PatternBudgetError(PatternLimitError):
    """The run spent its token or cost budget."""
