"""Structured output: turning a model's answer into a pydantic model.

Two routes, chosen per call:

1. **Native**: when the model supports it, the request carries an OpenAI ``response_format`` with the
   model's JSON schema, so the server constrains the answer.
2. **Parse cascade** (always applied to the answer, native or not): the whole text as JSON; else the
   first fenced code block; else the first balanced ``{...}`` object in the text that is valid JSON (a
   malformed object is skipped whole, nested objects included). Each stage validates against the model
   in strict mode (``"yes"`` is not ``true``). Nothing is repaired or guessed: when no stage validates,
   :class:`~baf.errors.StructuredOutputError` says what each stage found.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

import pydantic

from baf.errors import StructuredOutputError

__all__ = ["parse_structured", "response_format", "schema_instructions"]

M = TypeVar("M", bound=pydantic.BaseModel)

_FENCE_RE = re.compile(r"```(?:[A-Za-z0-9_-]+)?\s*\n(.*?)```", re.DOTALL)
_EXCERPT = 300


def response_format(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The OpenAI ``response_format`` asking for JSON that fits ``model``."""
    return {
        "type": "json_schema",
        "json_schema": {"name": model.__name__, "schema": model.model_json_schema(), "strict": False},
    }


def schema_instructions(model: type[pydantic.BaseModel]) -> str:
    """The instruction appended to a prompt when an answer must fit ``model``.

    Sent even with a native response format: servers that ignore the field still get told what to do.
    """
    schema = json.dumps(model.model_json_schema(), separators=(",", ":"))
    return f"Answer with one JSON object only, no other text, matching this JSON schema:\n{schema}"


def parse_structured(text: str | None, model: type[M]) -> M:
    """Parse the model's answer into ``model`` through the cascade described in the module docstring.

    Raises:
        StructuredOutputError: no stage produced a valid ``model``; ``attempts`` says why each failed.
    """
    raw = (text or "").strip()
    attempts: list[str] = []
    if not raw:
        raise StructuredOutputError(
            f"The model's answer is empty; expected a JSON object for {model.__name__}.", "", ["empty answer"]
        )
    for stage, candidate in _candidates(raw):
        if candidate is None:
            attempts.append(f"{stage}: nothing found")
            continue
        try:
            return model.model_validate_json(candidate, strict=True)  # "yes" is not True, "3" is not 3
        except pydantic.ValidationError as exc:
            attempts.append(f"{stage}: {_describe(exc)}")
    excerpt = raw if len(raw) <= _EXCERPT else f"{raw[:_EXCERPT]}… [{len(raw)} characters]"
    steps = "; ".join(attempts)
    raise StructuredOutputError(
        f"Could not read the model's answer as {model.__name__} ({steps}). Received: {excerpt!r}",
        raw,
        attempts,
    )


def _candidates(raw: str) -> list[tuple[str, str | None]]:
    fence = _FENCE_RE.search(raw)
    return [
        ("whole answer as JSON", raw),
        ("fenced code block", fence.group(1).strip() if fence else None),
        ("embedded JSON object", _first_object(raw)),
    ]


def _first_object(text: str) -> str | None:
    """The first balanced ``{...}`` in ``text`` that is valid JSON, scanning past braces in strings."""
    start = text.find("{")
    while start != -1:
        depth, in_string, escaped = 0, False, False
        next_from = start + 1  # never balanced: an inner object may still be a whole answer
        for index in range(start, len(text)):
            char = text[index]
            if in_string:
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    candidate = text[start : index + 1]
                    try:
                        json.loads(candidate)
                    except ValueError:
                        # Malformed as a whole: none of its nested objects is the answer either.
                        next_from = index + 1
                        break
                    return candidate
        start = text.find("{", next_from)
    return None


def _describe(exc: pydantic.ValidationError) -> str:
    errors = exc.errors(include_url=False)
    if errors and errors[0].get("type") == "json_invalid":
        return "not valid JSON"
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in errors[:3]]
    more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
    return "; ".join(parts) + more
