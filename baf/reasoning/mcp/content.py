"""The text a model reads for an MCP tool result's content blocks."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

__all__ = ["render_content"]


def render_content(content: list[Any], structured: Any = None) -> str:
    """Text blocks as they are (joined by blank lines), other blocks as one bracketed line each.

    Images and audio are not passed on (the tool-result message is text): the model learns their kind
    and size. A result with no content blocks but structured content is that content as JSON.
    """
    parts: list[str] = []
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.mime_type}, {_decoded_size(block.data)} bytes, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}" + (f": {block.name}" if getattr(block, "name", None) else "") + "]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            if text is not None:
                parts.append(text)
            else:
                mime = getattr(resource, "mime_type", None) or "binary"
                parts.append(f"[resource {resource.uri} ({mime}), {_decoded_size(resource.blob)} bytes, not shown]")
        else:
            parts.append(f"[{kind or type(block).__name__} content, not shown]")
    if not parts and structured is not None:
        return json.dumps(structured, ensure_ascii=False, default=str)
    return "\n\n".join(parts)


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)
