"""The LLM intent classifier: one model call per message, answered as JSON.

The model is shown the message and the candidate intents (names, descriptions, training sentences and
parameters) and asked for ``{"intent": NAME or null, "score": 0..1, "parameters": {...}}``. Its answer
is read with the pattern catalogue's structured-output cascade; an answer that is not such JSON comes back
as an answer with an ``error`` (and the raw text), which the engine records and treats as no match, as it
does an intent name that is not a candidate. The threshold (``nlp.intent_threshold``) is applied by the
engine, as for every classifier.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pydantic

from baf.core.intent import Intent
from baf.core.intent_classifier import ClassifierAnswer
from baf.errors import StructuredOutputError
from baf.llm.base import LLM
from baf.reasoning.patterns.structured import parse_structured, response_format, schema_instructions

__all__ = ["LLMIntentClassifier"]

SYSTEM_PROMPT = (
    "You classify a user's message into one of the intents listed. Pick the intent the message means, "
    "judging by each intent's description and example sentences; if none fits, answer null. Give your "
    "confidence from 0 to 1 as score, and the value of each parameter of the chosen intent that the "
    "message states (leave out the others)."
)


class _Answer(pydantic.BaseModel):
    """What the model must answer."""

    model_config = pydantic.ConfigDict(extra="forbid")

    intent: str | None = pydantic.Field(description="the name of the intent, or null if none fits")
    score: float = pydantic.Field(ge=0, le=1, description="confidence from 0 to 1")
    parameters: dict[str, Any] = pydantic.Field(default_factory=dict, description="extracted parameter values")


class LLMIntentClassifier:
    """Classifies with one model call per message.

    Args:
        llm: The model (any :class:`~baf.llm.base.LLM`; a ``ScriptedLLM`` in tests).
        native_json: Also send an OpenAI ``response_format`` with the answer's JSON schema (for servers
            that support it; the instruction is in the prompt either way).
        parameters: Extra request fields for the call (``temperature``, ...).
    """

    name = "llm"

    def __init__(self, llm: LLM, *, native_json: bool = False, parameters: dict[str, Any] | None = None) -> None:
        self.llm = llm
        self.native_json = native_json
        self.parameters = dict(parameters or {})

    def prompt(self, text: str, intents: Sequence[Intent]) -> str:
        """The user message sent to the model: the intents, then the message to classify."""
        listed = [
            {
                "name": intent.name,
                "description": intent.description,
                "examples": list(intent.training_sentences),
                "parameters": {p.name: p.description or f"the words written as {p.fragment} in the examples"
                               for p in intent.parameters},
            }
            for intent in intents
        ]  # fmt: skip
        return (
            f"Intents:\n{json.dumps(listed, ensure_ascii=False, indent=1)}\n\n"
            f"Message:\n{text}\n\n{schema_instructions(_Answer)}"
        )

    async def classify(self, text: str, intents: Sequence[Intent]) -> ClassifierAnswer:
        """Ask the model; a malformed answer is returned as no match with its ``error`` and ``raw`` text."""
        parameters = dict(self.parameters)
        if self.native_json:
            parameters["response_format"] = response_format(_Answer)
        response = await self.llm.predict_with_tools(
            [{"role": "user", "content": self.prompt(text, intents)}], [], parameters=parameters or None,
            system_message=SYSTEM_PROMPT,
        )  # fmt: skip
        raw = response.text or ""
        try:
            answer = parse_structured(raw, _Answer)
        except StructuredOutputError as exc:
            return ClassifierAnswer(None, 0.0, error=f"the model's answer is not the JSON asked for: {exc}", raw=raw)
        intent = answer.intent if answer.intent not in ("", "null", "none", "None") else None
        return ClassifierAnswer(intent, answer.score, dict(answer.parameters), raw=raw)
