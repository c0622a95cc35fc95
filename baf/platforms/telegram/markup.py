"""Replies as Telegram shows them: a small Markdown subset rendered to Telegram's HTML, split to fit.

Telegram's HTML parse mode is used rather than MarkdownV2: HTML needs only ``&``, ``<`` and ``>``
escaped, while MarkdownV2 has eighteen reserved characters and refuses the whole message if one is
missed. Every character of user, model and tool text passes through :func:`html.escape`; the only tags
in a message are the ones written here.

Rendered: fenced code blocks (```` ```lang ````), inline ``code``, ``**bold**`` and
``[text](https://...)`` links. Everything else is shown as written.
"""

from __future__ import annotations

import html
import re

__all__ = ["MESSAGE_LIMIT", "render_html", "split_message", "utf16_length"]

#: Telegram's limit for one message's text, in UTF-16 code units after entities are parsed.
MESSAGE_LIMIT = 4096

_FENCE = re.compile(r"```([A-Za-z0-9_+#.-]*)[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_INLINE = re.compile(
    r"`(?P<code>[^`\n]+)`"
    r"|\*\*(?P<bold>[^*\n](?:[^\n]*?[^*\n])?)\*\*"
    r"|\[(?P<label>[^\]\n]+)\]\((?P<url>https?://[^\s()]+)\)"
)


def utf16_length(text: str) -> int:
    """The length Telegram counts: UTF-16 code units (an emoji outside the BMP counts two)."""
    return len(text) + sum(1 for char in text if ord(char) > 0xFFFF)


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _render_inline(text: str) -> str:
    out: list[str] = []
    position = 0
    for match in _INLINE.finditer(text):
        out.append(_escape(text[position : match.start()]))
        if match.group("code") is not None:
            out.append(f"<code>{_escape(match.group('code'))}</code>")
        elif match.group("bold") is not None:
            out.append(f"<b>{_escape(match.group('bold'))}</b>")
        else:
            url = html.escape(match.group("url"), quote=True)
            out.append(f'<a href="{url}">{_escape(match.group("label"))}</a>')
        position = match.end()
    out.append(_escape(text[position:]))
    return "".join(out)


def render_html(markdown: str) -> str:
    """``markdown`` as Telegram HTML: the subset above rendered, every other character escaped.

    An unclosed code fence runs to the end of the text, as Markdown renderers do.
    """
    out: list[str] = []
    position = 0
    for match in _FENCE.finditer(markdown):
        out.append(_render_inline(markdown[position : match.start()]))
        language, code = match.group(1), match.group(2)
        code = code.removesuffix("\n")
        if language:
            out.append(f'<pre><code class="language-{_escape(language)}">{_escape(code)}</code></pre>')
        else:
            out.append(f"<pre>{_escape(code)}</pre>")
        position = match.end()
    out.append(_render_inline(markdown[position:]))
    return "".join(out)


def _cut_point(text: str, limit: int) -> tuple[int, int]:
    """Where the head of ``text`` ends and the rest begins, so the head fits ``limit`` UTF-16 units: at
    the last paragraph break, else line break, else space in the second half of the head (the break
    itself is dropped: Telegram would trim it); else as much as fits."""
    units = 0
    end = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            break
        end = index + 1
    else:
        return len(text), len(text)
    head = text[:end]
    for separator in ("\n\n", "\n", " "):
        at = head.rfind(separator)
        if at >= end // 2:
            return at, at + len(separator)
    return end, end


def split_message(markdown: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split ``markdown`` into pieces each of at most ``limit`` UTF-16 units, at paragraph, line or word
    breaks where it can. A code block cut in two is closed at the end of one piece and opened again
    (same language) at the start of the next, so each piece renders on its own.

    Rendering never lengthens the visible text (markup is removed, escapes are entities Telegram
    decodes), so each rendered piece fits the same limit.
    """
    if limit < 64:
        raise ValueError("a message limit under 64 units leaves no room for code fences")
    pieces: list[str] = []
    rest = markdown
    while utf16_length(rest) > limit:
        # Room for a closing fence, should the cut fall inside a code block.
        end, start = _cut_point(rest, limit - 4)
        head, rest = rest[:end], rest[start:]
        fences = list(re.finditer(r"```([A-Za-z0-9_+#.-]*)", head))
        if len(fences) % 2 == 1:  # the cut is inside a code block
            opening = fences[-1].group(0)
            head = head.rstrip("\n") + "\n```"
            rest = f"{opening}\n{rest}"
        pieces.append(head)
    pieces.append(rest)
    return [piece for piece in pieces if piece.strip()]
