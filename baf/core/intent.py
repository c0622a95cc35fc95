"""Intents: what a user means by a message, declared with training sentences and routed on by states.

An :class:`Intent` is declared with ``agent.new_intent(name, training_sentences, parameters, description)``.
A state routes on it with ``state.when_intent_matched(intent).go_to(other)``; the engine asks the agent's
intent classifier which of the state's candidate intents a text message means, records the answer as an
``intent_predicted`` record, and hands it to transitions and bodies as ``session.event.predicted_intent``
(an :class:`IntentPrediction`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from baf.errors import ConfigurationError

__all__ = ["Intent", "IntentParameter", "IntentPrediction"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True, slots=True)
class IntentParameter:
    """A value to pull out of a message that matches an intent.

    ``fragment`` is the placeholder written in the training sentences in place of the value
    (``"what is the weather in CITY"``); it defaults to the name in upper case. ``description`` tells a
    model-based classifier what the value is.
    """

    name: str
    fragment: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name or not _NAME.match(self.name):
            raise ConfigurationError(f"an intent parameter needs a name of letters, digits and _ ; got {self.name!r}")
        if not self.fragment:
            object.__setattr__(self, "fragment", self.name.upper())


@dataclass(frozen=True, slots=True, eq=False)
class Intent:
    """Something a user may mean, recognised from its training sentences. Create with ``agent.new_intent``."""

    name: str
    training_sentences: tuple[str, ...]
    parameters: tuple[IntentParameter, ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name or not _NAME.match(self.name):
            raise ConfigurationError(
                "an intent needs a name of letters, digits, '_', '.' and '-' (starting with a letter); "
                f"got {self.name!r}"
            )
        sentences = tuple(str(sentence).strip() for sentence in self.training_sentences)
        if not sentences or not all(sentences):
            raise ConfigurationError(
                f"intent {self.name!r} has no training sentences (or an empty one): a classifier cannot "
                "recognise it; give it at least one example of what a user would write"
            )
        object.__setattr__(self, "training_sentences", sentences)
        names = [parameter.name for parameter in self.parameters]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"intent {self.name!r} declares a parameter twice: {names}")
        for parameter in self.parameters:
            if not any(parameter.fragment in sentence for sentence in sentences):
                raise ConfigurationError(
                    f"parameter {parameter.name!r} of intent {self.name!r}: no training sentence holds its "
                    f"placeholder {parameter.fragment!r} (write it where the value goes)"
                )

    def __repr__(self) -> str:
        return f"Intent({self.name!r})"

    @classmethod
    def build(
        cls,
        name: str,
        training_sentences: Iterable[str] | None,
        parameters: Iterable[IntentParameter | str | Mapping[str, Any]] | None = None,
        description: str | None = None,
    ) -> Intent:
        """An intent from loose arguments: parameters may be names, dicts or :class:`IntentParameter`."""
        if isinstance(training_sentences, str):
            raise ConfigurationError(f"intent {name!r}: training_sentences must be a list of sentences, not one string")
        built: list[IntentParameter] = []
        for parameter in parameters or ():
            if isinstance(parameter, IntentParameter):
                built.append(parameter)
            elif isinstance(parameter, str):
                built.append(IntentParameter(parameter))
            elif isinstance(parameter, Mapping):
                built.append(IntentParameter(**parameter))
            else:
                raise ConfigurationError(f"intent {name!r}: a parameter must be a name or an IntentParameter")
        return cls(name, tuple(training_sentences or ()), tuple(built), description or "")


@dataclass(frozen=True, slots=True)
class IntentPrediction:
    """What the classifier made of a message: ``session.event.predicted_intent``.

    ``intent`` is the matched intent, or ``None`` when no candidate intent scored at least the agent's
    threshold (``nlp.intent_threshold``). ``score`` is the classifier's confidence in its best guess
    (0 to 1) and ``parameters`` the values it extracted. ``best`` names its best guess even when it fell
    below the threshold; ``error`` says why a classifier's answer could not be used (the model named an
    unknown intent, or did not answer JSON), in which case nothing matched.
    """

    intent: Intent | None
    score: float = 0.0
    parameters: Mapping[str, Any] = field(default_factory=dict)
    classifier: str = ""
    best: str | None = None
    error: str | None = None

    @property
    def matched(self) -> bool:
        """Whether an intent matched."""
        return self.intent is not None

    @property
    def intent_name(self) -> str | None:
        """The matched intent's name, or ``None``."""
        return self.intent.name if self.intent is not None else None

    def get_parameter(self, name: str, default: Any = None) -> Any:
        """The extracted value of parameter ``name``, or ``default``."""
        return self.parameters.get(name, default)
