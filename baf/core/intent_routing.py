"""Routing by intent: the engine's hook that classifies a text message, and global states.

Before the engine picks a transition for a text message, :func:`predict_intent` asks the agent's
classifier which of the current state's candidate intents (those its transitions name, plus every global
state's intent) the text means, applies the threshold (property ``nlp.intent_threshold``, default
:data:`DEFAULT_INTENT_THRESHOLD`), records the outcome as an ``intent_predicted`` record and sets
``session.event.predicted_intent``. Intent transitions are ordinary text transitions whose condition
reads that prediction. A re-run (``baf.replay.rerun``) serves each prediction from the log, so no
classifier (and no model) is asked again.

**Global states.** ``state.set_global(intent)`` makes ``state`` reachable from every other state when
``intent`` is matched (after that state's own transitions, which keep precedence). Its *component* is
the global state and every state reachable from it. Entering it records where the user was
(``return_to`` on the transition record); when the session comes to rest in a state of the component
that has no transitions of its own, the engine moves back there (a ``transition`` record labelled
``return from global ...``) without running that state's body again: the user is where they were,
waiting for their next message. Leaving the component by a transition forgets the return.
"""

from __future__ import annotations

import logging
import math
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from baf.core.events import ReceiveTextEvent
from baf.core.intent import Intent, IntentPrediction
from baf.core.intent_classifier import ClassifierAnswer
from baf.core.transition import Transition
from baf.errors import ConfigurationError
from baf.log.jsontext import json_copy
from baf.reasoning.effects import current_effect_source

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.events import Event
    from baf.core.live import LiveSession
    from baf.core.session import Session
    from baf.core.state import State

logger = logging.getLogger("baf.intents")

__all__ = [
    "DEFAULT_INTENT_THRESHOLD",
    "INTENT_PREDICTED",
    "THRESHOLD_PROPERTY",
    "candidate_intents",
    "entering_global",
    "global_component",
    "global_transitions",
    "intent_condition",
    "intent_threshold",
    "no_intent_condition",
    "predict_intent",
    "return_transition",
]

#: The record kind of a prediction.
INTENT_PREDICTED = "intent_predicted"
#: The agent property holding the minimum score for an intent to match.
THRESHOLD_PROPERTY = "nlp.intent_threshold"
DEFAULT_INTENT_THRESHOLD = 0.5


def intent_condition(intent: Intent) -> Callable[[Session], bool]:
    """The condition of ``when_intent_matched(intent)``: the message's prediction is ``intent``."""

    def condition(session: Session) -> bool:
        prediction = _prediction(session.event)
        return prediction is not None and prediction.intent is intent

    condition.__name__ = f"intent {intent.name}"
    return condition


def no_intent_condition(session: Session) -> bool:
    """The condition of ``when_no_intent_matched()``: the message was classified and nothing matched."""
    prediction = _prediction(session.event)
    return prediction is not None and prediction.intent is None


no_intent_condition.__name__ = "no intent matched"


def _prediction(event: Event | None) -> IntentPrediction | None:
    return event.predicted_intent if event is not None else None


def global_transitions(state: State) -> list[Transition]:
    """The transitions that reach every global state of ``state``'s agent from ``state``."""
    found = []
    for intent_name, target in state.agent.global_states.items():
        if target is state:
            continue
        intent = state.agent.get_intent(intent_name)
        found.append(Transition(state, target, ReceiveTextEvent, [intent_condition(intent)],
                                f"global intent {intent.name}", intent))  # fmt: skip
    return found


def global_component(target: State) -> set[str]:
    """The names of the states reachable from global state ``target`` by its own transitions."""
    seen = {target.name}
    todo = [target]
    while todo:
        for transition in todo.pop().transitions:
            if transition.dest.name not in seen:
                seen.add(transition.dest.name)
                todo.append(transition.dest)
    return seen


def candidate_intents(state: State) -> list[Intent]:
    """The intents a message may mean in ``state``: those its transitions name, then the global ones."""
    found: dict[str, Intent] = {}
    for transition in [*state.transitions, *global_transitions(state)]:
        if transition.intent is not None:
            found.setdefault(transition.intent.name, transition.intent)
    return list(found.values())


async def predict_intent(live: LiveSession, event: Event) -> None:
    """Classify a text message for the current state and record it, if the state routes by intent."""
    if not isinstance(event, ReceiveTextEvent):
        return
    state = live.session.current_state
    agent = live.agent
    if not state.routes_by_intent and not agent.global_states:
        return  # the common case, kept cheap: no intents anywhere near this state
    candidates = candidate_intents(state)
    threshold = intent_threshold(agent)
    answer, classifier = await _answer(live, event.message, candidates)
    by_name = {intent.name: intent for intent in candidates}
    error = answer.error
    if error is None and answer.intent is not None and answer.intent not in by_name:
        error = f"the classifier answered {answer.intent!r}, which is not one of {sorted(by_name)}"
    parameters: dict[str, Any] = {}
    if error is None:
        try:
            parameters = json_copy(dict(answer.parameters or {}))
        except (TypeError, ValueError) as exc:
            error = f"the classifier's parameters are not JSON: {exc}"
    score = answer.score if isinstance(answer.score, int | float) and math.isfinite(answer.score) else 0.0
    matched = by_name.get(answer.intent or "") if error is None and score >= threshold else None
    data: dict[str, Any] = {
        "event_seq": live.event_seq,
        "intent": matched.name if matched else None,
        "score": float(score),
        "parameters": parameters if matched else {},
        "classifier": classifier,
        "candidates": list(by_name),
        "threshold": threshold,
    }
    if matched is None and error is None and answer.intent is not None:
        data["best"] = answer.intent
    if error is not None:
        data["error"] = error
    if answer.raw is not None:
        data["raw"] = answer.raw
    live.record(INTENT_PREDICTED, data)
    event.predicted_intent = IntentPrediction(matched, float(score), data["parameters"], classifier,
                                              data.get("best", data["intent"]), error)  # fmt: skip


async def _answer(live: LiveSession, text: str, candidates: list[Intent]) -> tuple[ClassifierAnswer, str]:
    """The classifier's answer and name: from the log in a re-run, else asked live.

    A classifier that raises counts as no match (an outage must not stop the conversation): the
    ``intent_predicted`` record says so in its ``error``, and the traceback goes to the ``baf.intents``
    logger, redacted. It is not a separate ``error`` record, so a re-run, which serves the prediction
    from the log without asking the classifier, writes the same records.
    """
    served = getattr(current_effect_source(), "intent_prediction", None)
    if served is not None:
        data = served()
        answer = ClassifierAnswer(data.get("best", data.get("intent")), float(data.get("score", 0.0)),
                                  dict(data.get("parameters") or {}), data.get("error"), data.get("raw"))  # fmt: skip
        return answer, str(data.get("classifier", ""))
    classifier = live.agent.intent_classifier
    if not candidates:
        return ClassifierAnswer(None, 0.0), classifier.name
    try:
        return await classifier.classify(text, candidates), classifier.name
    except Exception as exc:
        shown = live.agent.redactor.redact_text("".join(traceback.format_exception(exc)))
        logger.error("session %s: the intent classifier %r raised\n%s", live.id, classifier.name, shown)
        return ClassifierAnswer(None, 0.0, error=f"the classifier raised {type(exc).__name__}: {exc}"), classifier.name


def intent_threshold(agent: Agent) -> float:
    """The agent's ``nlp.intent_threshold`` as a number from 0 to 1."""
    value = agent.get_property(THRESHOLD_PROPERTY, DEFAULT_INTENT_THRESHOLD)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigurationError(f"property {THRESHOLD_PROPERTY} must be a number from 0 to 1, got {value!r}")
    return float(value)


def entering_global(live: LiveSession, transition: Transition) -> dict[str, Any]:
    """The fields a transition record carries for the return from global states.

    Entering a global state from outside its component remembers the source; a transition out of the
    component of the global state being visited forgets it; anything else leaves it as it is.
    """
    agent = live.agent
    projection = live.projection
    dest = transition.dest
    if dest.name in agent.global_state_names and transition.source is not dest:
        if projection.return_to is None or projection.visiting is None:
            return {"return_to": transition.source.name, "visiting": dest.name}
        if dest.name not in global_component(agent.get_state(projection.visiting)):
            return {"visiting": dest.name}  # another global state: it returns to where the user was first
        return {}
    if projection.visiting is not None and dest.name not in global_component(agent.get_state(projection.visiting)):
        return {"return_to": None, "visiting": None}
    return {}


def return_transition(live: LiveSession) -> Transition | None:
    """The move back from a finished global component, if the session has come to rest at its end."""
    projection = live.projection
    if projection.return_to is None or projection.visiting is None:
        return None
    state = live.session.current_state
    if state.transitions:
        return None  # the component goes on from here
    agent = live.agent
    if projection.return_to not in agent.state_names:
        return None
    back = agent.get_state(projection.return_to)
    return Transition(state, back, None, [], f"return from global {projection.visiting}")
