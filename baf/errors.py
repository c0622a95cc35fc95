"""Every exception baf raises, in one tree.

::

    BafError
    ├── ConfigurationError          the agent was wired wrongly (duplicate state, two initial states, ...)
    ├── SessionVariableError        a session variable that cannot be stored (not JSON-serialisable)
    ├── LogError                    the session log broke one of its guarantees
    │   ├── LogConflictError        (session_id, seq) already exists: an append never overwrites
    │   ├── CorruptRecordError      a stored record cannot be decoded; names session and seq
    │   ├── UnknownRecordVersionError  a record written by a newer baf than this one
    │   └── LogClosedError          append or read on a store that is not open
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
    └── WorkspaceError              a workspace operation was refused
        └── PathEscapeError         a path that would leave the workspace root

Framework invariants (the ``LogError`` branch) propagate: they mean the log cannot be trusted.
Everything raised by user code (a body, a tool, a platform callback) is recorded as an ``error``
record and contained; the session goes on.
"""

from __future__ import annotations

__all__ = [
    "BafError",
    "ConfigurationError",
    "CorruptRecordError",
    "LLMConnectionError",
    "LLMError",
    "LLMRateLimitError",
    "LLMResponseError",
    "LLMStatusError",
    "LLMTimeoutError",
    "LogClosedError",
    "LogConflictError",
    "LogError",
    "PathEscapeError",
    "SessionVariableError",
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
