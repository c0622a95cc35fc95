"""Intent classifiers: one interface, and a small offline classifier that needs no model.

A classifier answers which of the candidate intents a text means, with a score from 0 to 1 and the
parameters it extracted. It does not apply the threshold: the engine does (``nlp.intent_threshold``), so
every classifier is judged by the same rule and the record shows the best guess even below it.
The model-based classifier is ``baf.library.intents.LLMIntentClassifier``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from baf.core.intent import Intent

__all__ = ["ClassifierAnswer", "IntentClassifier", "WordOverlapClassifier"]


@dataclass(frozen=True, slots=True)
class ClassifierAnswer:
    """A classifier's answer before the threshold: its best intent (by name) or ``None``.

    ``error`` says why the answer could not be used (it then counts as no match) and ``raw`` keeps what
    a model said, for the record.
    """

    intent: str | None
    score: float = 0.0
    parameters: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    raw: str | None = None


@runtime_checkable
class IntentClassifier(Protocol):
    """Tells which of ``intents`` a message means. ``name`` is recorded with each prediction."""

    name: str

    async def classify(self, text: str, intents: Sequence[Intent]) -> ClassifierAnswer:
        """The best of ``intents`` for ``text`` (``intent=None`` if none fits at all)."""
        ...


_WORD = re.compile(r"\w+", re.UNICODE)


class WordOverlapClassifier:
    """An offline classifier: no model, no training, deterministic.

    A message that matches a training sentence word for word (placeholders standing for any words)
    scores 1 and yields the placeholders' values as parameters. Otherwise the score is the best word
    overlap (Dice coefficient of the word sets) with any training sentence. Good enough for tests, demos
    and agents whose users pick from offered phrases; use the LLM classifier for free text.
    """

    name = "word_overlap"

    async def classify(self, text: str, intents: Sequence[Intent]) -> ClassifierAnswer:
        """Score every intent's training sentences against ``text``; the best intent wins (first on ties)."""
        words = set(_words(text))
        best = ClassifierAnswer(None, 0.0)
        for intent in intents:
            for sentence in intent.training_sentences:
                parameters = _match_exactly(sentence, intent, text)
                if parameters is not None:
                    return ClassifierAnswer(intent.name, 1.0, parameters)
                score = _dice(words, _sentence_words(_without_fragments(sentence, intent)))
                if score > best.score:
                    best = ClassifierAnswer(intent.name, round(score, 4))
        return best


def _words(text: str) -> list[str]:
    return [word.lower() for word in _WORD.findall(text)]


@functools.lru_cache(maxsize=4096)
def _sentence_words(sentence: str) -> frozenset[str]:
    return frozenset(_words(sentence))


def _dice(a: set[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return 2 * len(a & b) / (len(a) + len(b))


def _without_fragments(sentence: str, intent: Intent) -> str:
    for parameter in intent.parameters:
        sentence = sentence.replace(parameter.fragment, " ")
    return sentence


def _match_exactly(sentence: str, intent: Intent, text: str) -> dict[str, Any] | None:
    """The parameters if ``text`` is ``sentence`` word for word (case and punctuation aside), else ``None``."""
    fragments = tuple((parameter.fragment, parameter.name) for parameter in intent.parameters)
    pattern = _sentence_pattern(sentence, fragments)
    match = pattern.match(text.strip()) if pattern is not None else None
    if match is None:
        return None
    return {name: value.strip() for name, value in match.groupdict().items()}


@functools.lru_cache(maxsize=4096)
def _sentence_pattern(sentence: str, fragments: tuple[tuple[str, str], ...]) -> re.Pattern[str] | None:
    """The regular expression of a training sentence, built once (it was half of a message's cost)."""
    names = dict(fragments)
    pattern = [r"^\W*"]
    if names:
        alternatives = "|".join(re.escape(f) for f in sorted(names, key=len, reverse=True))
        pieces = re.split(f"({alternatives})", sentence)
    else:
        pieces = [sentence]
    for piece in pieces:
        if piece in names:
            pattern.append(rf"(?P<{names[piece]}>.+?)")
        else:
            words = _WORD.findall(piece)
            if words:
                pattern.append(r"\W*" + r"\W+".join(re.escape(word) for word in words) + r"\W*")
            else:
                pattern.append(r"\W*")
    pattern.append(r"\W*$")
    try:
        return re.compile("".join(pattern), re.IGNORECASE | re.UNICODE)
    except re.error:  # a parameter used twice in one sentence: no exact match, overlap still scores it
        return None
