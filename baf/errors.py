"""Every exception baf raises, in one tree.

::

    BafError
    ├── ConfigurationError          the agent was wired wrongly (duplicate state, two initial states, ...)
    │                               or cannot start as set up (a platform's port is in use, ...)
    ├── SessionVariableError        a session variable that cannot be stored (not JSON-serialisable)
    ├── SessionIdError              a session id that cannot be used (empty, not text, holds a secret)
    ├── LogError                    the session log broke one of its guarantees
    │   ├── LogConflictError        (session_id, seq) already exists: an append never overwrites
    │   ├── CorruptRecordError      a stored record cannot be decoded; names session and seq
    │   │   └── CorruptSnapshotError  a snapshot record fails its checks or disagrees with the fold
    │   ├── UnknownRecordVersionError  a record written by a newer baf than this one
    │   ├── LogClosedError          append or read on a store that is not open
    │   └── LogReadOnlyError        append on a store opened read-only
    ├── LLMError                    the model could not be used
    │   ├── LLMConnectionError      the server could not be reached (after retries)
    │   ├── LLMTimeoutError         the request took longer than its timeout (after retries)
    │   ├── LLMStatusError          a non-2xx answer after retries; ``status_code`` says which
    │   │   └── LLMRateLimitError   HTTP 429 that outlived the retries
    │   └── LLMResponseError        the answer arrived but is not a usable completion
    ├── ToolError                   a tool call that could not be carried out
    │   ├── ToolNotFoundError       the model named a tool that does not exist
    │   ├── ToolArgumentError       arguments that are not JSON, or do not fit the tool's schema
    │   ├── ToolTimeoutError        the tool ran past its timeout
    │   └── ToolExecutionError      the tool itself raised; the original is ``__cause__``
    ├── WorkspaceError              a workspace operation was refused
    │   └── PathEscapeError         a path that would leave the workspace root
    └── PatternError                a reasoning pattern could not finish (``baf.reasoning.patterns``)
        ├── StructuredOutputError   the model's answer does not parse into the expected model
        ├── PatternNotFoundError    no pattern registered under that name
        └── PatternLimitError       a guard stopped the run; ``partial`` holds what was done
            ├── PatternStepLimitError     max_steps ran out
            ├── PatternDepthLimitError    max_depth was reached where more depth was needed
            ├── PatternStepTimeoutError   a model call ran past step_timeout
            └── PatternBudgetError        the token or cost budget is spent

Framework invariants (the ``LogError`` branch) propagate: they mean the log cannot be trusted.
Everything raised by user code (a body, a tool, a platform callback) is recorded as an ``error``
record and contained; the session goes on.
"""

from __future__ import annotations

__all__ = [
    "BafError",
    "ConfigurationError",
    "CorruptRecordError",
    "CorruptSnapshotError",
    "LLMConnectionError",
    "LLMError",
    "LLMRateLimitError",
    "LLMResponseError",
    "LLMStatusError",
    "LLMTimeoutError",
    "LogClosedError",
    "LogConflictError",
    "LogError",
    "LogReadOnlyError",
    "PathEscapeError",
    "PatternBudgetError",
    "PatternDepthLimitError",
    "PatternError",
    "PatternLimitError",
    "PatternNotFoundError",
    "PatternStepLimitError",
    "PatternStepTimeoutError",
    "SessionIdError",
    "SessionVariableError",
    "StructuredOutputError",
    "ToolArgumentError",
    "ToolError",
    "ToolExecutionError",
    "ToolNotFoundError",
    "ToolTimeoutError",
    "UnknownRecordVersionError",
    "WorkspaceError",
]


class BafError(Exception):
    """Base of every exception raised by baf."""


class ConfigurationError(BafError):
    """The agent, a state or a transition was set up in a way that cannot work."""


class SessionVariableError(BafError, TypeError):
    """A session variable value that cannot be recorded (it must be JSON-serialisable)."""


class SessionIdError(BafError, ValueError):
    """A session id that cannot be used: empty, not a string, or holding one of the agent's secrets
    (ids are stored and shown as they are, in every record, so an id must never carry a secret)."""


class LogError(BafError):
    """The session log could not keep one of its guarantees."""


class LogConflictError(LogError):
    """An append would reuse an existing ``(session_id, seq)``; nothing was written."""

    def __init__(self, session_id: str, seq: int) -> None:
        super().__init__(f"session {session_id!r} already has a record at seq {seq}; the log never overwrites")
        self.session_id = session_id
        self.seq = seq


class CorruptRecordError(LogError):
    """A stored record cannot be decoded."""

    def __init__(self, session_id: str, seq: int, reason: str) -> None:
        super().__init__(f"corrupt record in session {session_id!r} at seq {seq}: {reason}")
        self.session_id = session_id
        self.seq = seq
        self.reason = reason


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


class LogReadOnlyError(LogError):
    """``append`` on a store opened read-only (``SQLiteLog(path, read_only=True)``); nothing was written."""


class LLMError(BafError):
    """The language model could not produce a response."""


class LLMConnectionError(LLMError):
    """The model server could not be reached."""


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


class WorkspaceError(BafError):
    """A workspace operation was refused."""


class PathEscapeError(WorkspaceError):
    """A path that would reach outside the workspace root."""


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


class PatternDepthLimitError(PatternLimitError):
    """The pattern needed to go deeper than its ``max_depth``."""


class PatternStepTimeoutError(PatternLimitError):
    """A model call of the pattern ran past ``step_timeout`` (tools past ``tool_timeout`` give the model
    an error result instead)."""


class PatternBudgetError(PatternLimitError):
    """The run spent its token or cost budget."""
