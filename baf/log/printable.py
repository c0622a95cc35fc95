"""Text from the log as a terminal may show it: the characters a terminal acts on written as escapes.

A log may come from someone else, and a model writes whatever it is led to write: a reply, a task or a
tool's argument may hold escape sequences that set the user's clipboard (OSC 52), hide a link's target
(OSC 8), retitle the window, or bidirectional controls that reorder what is shown. What a terminal shows
must be what the text holds: ``baf log``, ``baf replay`` and the terminal chat print text through
:func:`visible`.
"""

from __future__ import annotations

import shlex
from typing import Final

__all__ = ["shell_word", "visible", "visible_json"]

# What a terminal acts on instead of showing: C0 controls but newline and tab (ESC starts colour,
# cursor and OSC 8 hyperlink sequences; CR overwrites the line), DEL, C1 controls (U+009B is a CSI
# of its own), and the bidirectional controls and line separators that reorder or break what is shown.
_ACTIVE: Final = [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F,
                  0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]  # fmt: skip
_ESCAPED: Final = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _ACTIVE}
_JSON_ESCAPED: Final = {c: f"\\u{c:04x}" for c in _ACTIVE}


def visible(text: str) -> str:
    """``text`` with the characters a terminal would act on written as escapes (``\\x1b``, ``\\u202e``)."""
    return text.translate(_ESCAPED)


def visible_json(text: str) -> str:
    """JSON text with those characters as ``\\uXXXX`` escapes: the same JSON value, safe to print.

    ``json.dumps`` escapes C0 controls but writes C1 controls and bidirectional controls as they are.
    """
    return text.translate(_JSON_ESCAPED)


# In a $'...' word: what bash and zsh would otherwise read as the end of the word or an escape, and what a
# terminal would act on (newline and tab too: the word must stay on one line to be pasted).
_ANSI_C: Final = {
    ord("\\"): "\\\\",
    ord("'"): "\\'",
    ord("\n"): "\\n",
    ord("\t"): "\\t",
    **{c: f"\\x{c:02x}" if c < 0x80 else f"\\u{c:04x}" for c in _ACTIVE},
}
_NEEDS_ESCAPES: Final = frozenset([*_ACTIVE, ord("\n"), ord("\t")])


def shell_word(value: str) -> str:
    """``value`` as one word of a shell command line that can be printed and pasted back.

    ``shlex.quote(value)`` when that is safe to print; a value holding characters a terminal acts on (or a
    newline or tab) is written ``$'...'`` with those characters as escapes, which bash and zsh read back
    as the same value (``$'a\\x1bb'``), where :func:`visible` alone would print an escape a shell takes
    literally, naming another value.
    """
    if not any(ord(character) in _NEEDS_ESCAPES for character in value):
        return shlex.quote(value)
    return "$'" + value.translate(_ANSI_C) + "'"
