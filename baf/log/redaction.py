"""Secrets never reach the log: a ``Redactor`` replaces known secret values with ``[REDACTED]``.

Redaction happens at write time, in ``SessionWriter.record``, before a record is folded or buffered,
so the database files, ``baf replay`` and every export only ever see the redacted form::

    redactor = Redactor.from_environment()      # OPENAI_API_KEY and other *_API_KEY / *_TOKEN ... values
    redactor.add("hunter2-the-password")        # what Agent.mark_secret(value) does
    redactor.redact({"text": "my password is hunter2-the-password"})
    # -> {"text": "my password is [REDACTED]"}

Secrets are matched as exact substrings, anywhere in the data: in strings nested at any depth in dicts
and lists, and in dict keys. Values that are not strings (numbers, booleans, None) are left alone.
A string holding a backslash is also searched for the secret written with escapes, as JSON or Python
would write it (``\\u0065`` for ``e``, ``\\"``, ``\\x41`` ..., at any depth of escaping): the raw
arguments a model sends for a tool call are JSON text, and a secret escaped there is still the secret
once the tool, or anyone reading the log, decodes it.

Two places hold secrets: a ``Redactor`` (one per agent) and the process-wide registry filled by
:func:`register_secret`, which LLM clients use for the API keys they are given (they know nothing of
agents). Every ``Redactor`` applies both.

What redaction does *not* do: it does not guess. A secret that is not registered, in the environment
or marked, is written as it is. Code that needs the real value (a tool, a body) still has it in memory;
only the record is redacted, so a session variable set to a secret reads back as ``[REDACTED]`` after a
restart or on replay.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from baf.log.record import Record

__all__ = [
    "CREDENTIAL_HEADERS",
    "CREDENTIAL_HEADER_WORDS",
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "SECRET_ENV_SUFFIXES",
    "Redactor",
    "is_credential_header",
    "log_exception",
    "register_header_secrets",
    "register_secret",
    "registered_secrets",
]

#: What a secret is replaced with.
REDACTED: Final = "[REDACTED]"

#: Shorter values are refused: redacting "a" or "42" would shred every record and hide nothing.
MIN_SECRET_LENGTH: Final = 6

#: Environment variables whose values are treated as secrets by :meth:`Redactor.from_environment`.
SECRET_ENV_SUFFIXES: Final[tuple[str, ...]] = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD")

_registry: set[str] = set()
_registry_version = 0
_registry_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Add ``value`` to the process-wide secrets every ``Redactor`` applies.

    For code that holds a secret but does not know the agent it serves (an LLM client given
    ``api_key=``). ``None``, and values shorter than :data:`MIN_SECRET_LENGTH` (placeholders such as
    local servers' ``"none"``), are ignored rather than refused, so callers need not check.
    """
    global _registry_version
    if not isinstance(value, str) or len(value) < MIN_SECRET_LENGTH:
        return
    with _registry_lock:
        if value not in _registry:
            _registry.add(value)
            _registry_version += 1


#: Request headers whose values are credentials, whatever their name says (compared lower-case).
CREDENTIAL_HEADERS: Final = frozenset({"authorization", "proxy-authorization", "cookie"})
#: A header whose name holds one of these (lower-case) carries a credential too: ``X-API-Key``, ``X-Auth-Token``.
CREDENTIAL_HEADER_WORDS: Final = ("key", "token", "secret", "auth")


def is_credential_header(name: str) -> bool:
    """Whether header ``name`` carries a credential: ``Authorization``, ``Proxy-Authorization``, ``Cookie``,
    or a name holding ``key``, ``token``, ``secret`` or ``auth`` (case-insensitive)."""
    lowered = name.lower()
    return lowered in CREDENTIAL_HEADERS or any(word in lowered for word in CREDENTIAL_HEADER_WORDS)


def register_header_secrets(headers: Mapping[str, str]) -> None:
    """:func:`register_secret` for the values of the credential headers of ``headers``
    (:func:`is_credential_header`), for code given headers to send (an MCP server's, an A2A peer's).

    The whole value is a secret, and so is each credential in it, so that the credential is redacted
    where it appears alone: the token of ``Bearer <token>``, each value of ``Cookie: a=<v1>; b=<v2>``.
    """
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str) or not is_credential_header(name):
            continue
        register_secret(value.strip())
        if name.lower() == "cookie":
            for pair in value.split(";"):
                register_secret(pair.partition("=")[2].strip())
        else:
            register_secret(value.strip().partition(" ")[2].strip())  # after a scheme (Bearer, Basic, ...)


def log_exception(logger: logging.Logger, redactor: Redactor | None, message: str, *args: object) -> None:
    """``logger.exception(message, *args)`` with the exception's text and traceback redacted.

    Call it in an ``except`` block, as ``logger.exception``. An exception's message often quotes what
    was being handled (a request, a URL with a token): what it logs goes through ``redactor`` (the
    agent's, or the process-wide secrets alone when ``None``), as the records do.
    """
    exc = sys.exc_info()[1]
    shown = (redactor or Redactor()).redact_text("".join(traceback.format_exception(exc)) if exc else "")
    logger.error(f"{message}\n%s", *args, shown.rstrip("\n"))


def registered_secrets() -> frozenset[str]:
    """The process-wide secrets (for tests and diagnostics; treat the values with care)."""
    with _registry_lock:
        return frozenset(_registry)


class Redactor:
    """Replaces known secret values with :data:`REDACTED`, recursively through record data.

    Thread-safe: sync bodies record from worker threads. ``redact`` is the hot path (it runs for every
    record); with no secrets it returns its argument at the cost of two attribute reads, and it copies
    only the containers that hold a secret. With secrets, data that holds none is recognised in one
    search of its JSON text (see :meth:`redact`) rather than by walking it string by string.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._own: set[str] = set()
        self._lock = threading.Lock()
        # The compiled patterns (see _build), the secrets they match, and the registry version they were
        # built for.
        self._patterns: _Patterns = (None, None, None)
        self._secrets: tuple[str, ...] = ()
        self._built_for = -1
        for secret in secrets:
            self.add(secret)

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, suffixes: Iterable[str] = SECRET_ENV_SUFFIXES
    ) -> Redactor:
        """A redactor for the values of ``OPENAI_API_KEY`` and every variable ending in ``suffixes``."""
        env = os.environ if environ is None else environ
        ends = tuple(suffixes)
        redactor = cls()
        for name, value in env.items():
            if name.upper().endswith(ends) and len(value) >= MIN_SECRET_LENGTH:
                redactor.add(value)
        return redactor

    def add(self, secret: str) -> None:
        """Treat ``secret`` as secret from now on. Raises ``ValueError`` for a value too short to be one."""
        if not isinstance(secret, str):
            raise TypeError(f"a secret must be a str, not {type(secret).__name__}")
        if len(secret) < MIN_SECRET_LENGTH:
            raise ValueError(
                f"a secret must have at least {MIN_SECRET_LENGTH} characters (got {len(secret)}): "
                "redacting shorter strings would destroy ordinary text"
            )
        with self._lock:
            if secret not in self._own:
                self._own.add(secret)
                self._built_for = -1

    @property
    def active(self) -> bool:
        """Whether there is anything to redact."""
        return self._current_patterns()[0] is not None

    def redact(self, value: Any) -> Any:
        """``value`` with every secret replaced; the same object when it holds none."""
        pattern, in_json, escaped = self._current_patterns()
        if pattern is None:
            return value
        if in_json is not None and _clean_in_json(value, in_json):
            return value
        return _walk(value, pattern, escaped)

    def redact_text(self, text: str) -> str:
        """``text`` with every secret replaced (for output that is not record data)."""
        pattern, _, escaped = self._current_patterns()
        return text if pattern is None else _sub(text, pattern, escaped)

    def unfinished_secret(self, text: str) -> int:
        """How many characters at the end of ``text`` could be the beginning of a secret (0: none).

        For text shown while it is still being written (a model's streamed answer): holding those
        characters back until more arrive means a secret split across two pieces is still replaced
        whole. Secrets written with escapes are not looked for here (see :meth:`redact_text`)."""
        self._current_patterns()
        longest = 0
        for secret in self._secrets:
            start = text.find(secret[0], max(len(text) - len(secret) + 1, 0))
            while start != -1:
                if secret.startswith(text[start:]):
                    longest = max(longest, len(text) - start)
                    break
                start = text.find(secret[0], start + 1)
        return longest

    def redact_record(self, record: Record) -> Record:
        """``record`` with its data (and session id) redacted; the same object when clean."""
        pattern, _, escaped = self._current_patterns()
        if pattern is None:
            return record
        data = _walk(record.data, pattern, escaped)
        session_id = _sub(record.session_id, pattern, escaped)
        if data is record.data and session_id == record.session_id:
            return record
        return Record(session_id, record.seq, record.kind, data, record.ts, record.version)

    def _current_patterns(self) -> _Patterns:
        """The patterns for the secrets registered now: the last build's, or a new one after a registration."""
        version = _registry_version
        if self._built_for == version:
            return self._patterns  # one attribute, so a thread never sees halves of two builds
        with self._lock, _registry_lock:
            secrets = self._own | _registry
            self._patterns = _build(secrets)
            self._secrets = tuple(secrets)
            self._built_for = _registry_version
            return self._patterns


@dataclasses.dataclass(frozen=True, slots=True)
class _Escaped:
    """Secrets with any of their characters escaped: ``pattern`` finds them, ``trigger`` is a cheap test
    for text that may hold one (a backslash before a letter some escape of theirs starts with)."""

    trigger: re.Pattern[str]
    pattern: re.Pattern[str]


# The pattern matching any secret in text; the same over JSON text (UTF-8), or None when some secret
# does not appear as itself in JSON (it holds a quote, a backslash or a control character); and the
# secrets written with escapes (for text holding a backslash).
_Patterns = tuple[re.Pattern[str] | None, re.Pattern[bytes] | None, _Escaped | None]


def _build(secrets: set[str]) -> _Patterns:
    if not secrets:
        return None, None, None
    # Longest first, so a secret containing another is replaced whole.
    ordered = sorted(secrets, key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, ordered)))
    try:
        verbatim = all(orjson.dumps(s) == b'"' + s.encode() + b'"' for s in ordered)
    except (TypeError, UnicodeEncodeError):  # a lone surrogate: only the walk can look for it
        verbatim = False
    in_json = re.compile(b"|".join(re.escape(s.encode()) for s in ordered)) if verbatim else None
    letters = {"x", "u", "U"} | {_SHORT_ESCAPES[c] for s in ordered for c in s if c in _SHORT_ESCAPES}
    escaped = _Escaped(
        trigger=re.compile("\\\\[" + re.escape("".join(sorted(letters))) + "]"),
        pattern=re.compile("|".join("".join(_escaped_char(c, i == 0) for i, c in enumerate(s)) for s in ordered)),
    )
    return pattern, in_json, escaped


# The characters JSON or Python may write as a backslash and one letter, and that letter.
_SHORT_ESCAPES: Final = {"\n": "n", "\t": "t", "\r": "r", "\b": "b", "\f": "f", '"': '"', "'": "'",
                         "\\": "\\", "/": "/"}  # fmt: skip


def _escaped_char(char: str, first: bool) -> str:
    """A regular expression for ``char`` as itself or as a JSON or Python escape, behind any number of
    backslashes (text escaped more than once, such as JSON inside a JSON string).

    The backslashes are taken possessively (``++``), and a secret's first escape only where a run of
    them begins: tried at every backslash of a long run and backtracked through it, the search would take
    quadratic time (seconds for a few ten thousand backslashes).
    """
    if char == "\\":  # itself, or escaped: any run of backslashes
        return r"(?:\\++|\\++x5[cC]|\\++u005[cC]|\\++U0000005[cC])"
    code = ord(char)
    run = (r"(?<!\\)" if first else "") + r"\\++"
    forms = [re.escape(char)]
    if char in _SHORT_ESCAPES:
        forms.append(run + re.escape(_SHORT_ESCAPES[char]))
    if code < 0x100:
        forms.append(run + "x" + _hex(code, 2))
    if code < 0x10000:
        forms.append(run + "u" + _hex(code, 4))
    else:  # JSON writes it as a surrogate pair
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms.append(run + "u" + _hex(high, 4) + r"\\++u" + _hex(low, 4))
    forms.append(run + "U" + _hex(code, 8))
    return "(?:" + "|".join(forms) + ")"


def _hex(code: int, digits: int) -> str:
    """``code`` in hexadecimal, either case."""
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{code:0{digits}x}")


def _sub(text: str, pattern: re.Pattern[str], escaped: _Escaped | None) -> str:
    """``text`` with every secret replaced, written as it is or, where a backslash could start an escape,
    written with escapes."""
    if escaped is not None and "\\" in text and escaped.trigger.search(text):
        return escaped.pattern.sub(REDACTED, text)
    return pattern.sub(REDACTED, text) if pattern.search(text) else text


def _clean_in_json(value: Any, in_json: re.Pattern[bytes]) -> bool:
    """Whether ``value`` certainly holds no secret: its JSON text does not contain one.

    orjson escapes character by character, and only quotes, backslashes and control characters, so
    a secret made of none of them (``_build`` checks) appears verbatim in the JSON text of any string
    or key containing it. Anything orjson does not write as JSON (other key types, subclasses of str
    that ``_walk`` treats as strings, unknown objects) makes this answer False, and the walk decides.
    """
    try:
        text = orjson.dumps(value, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
    except TypeError:
        return False
    # A backslash in a string (written "\\\\" in JSON) may start an escaped secret: only the walk sees those.
    return b"\\\\" not in text and in_json.search(text) is None


def _walk(value: Any, pattern: re.Pattern[str], escaped: _Escaped | None = None) -> Any:
    """Redact strings inside ``value``; containers are copied only if something inside changed."""
    if isinstance(value, str):
        return _sub(value, pattern, escaped)
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for key, item in value.items():
            new_key = _walk(key, pattern, escaped) if isinstance(key, str) else key
            new_item = _walk(item, pattern, escaped)
            changed = changed or new_key is not key or new_item is not item
            out[new_key] = new_item
        return out if changed else value
    if isinstance(value, list | tuple):
        items = [_walk(item, pattern, escaped) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # A copy with its fields replaced, set directly: frozen dataclasses and fields outside
        # __init__ included (what a platform is sent live may be one, e.g. a ReasoningStep).
        replaced: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            new = _walk(item, pattern, escaped)
            if new is not item:
                replaced[f.name] = new
        if not replaced:
            return value
        clone = copy.copy(value)
        for name, new in replaced.items():
            object.__setattr__(clone, name, new)
        return clone
    return value
