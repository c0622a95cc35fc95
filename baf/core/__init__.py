"""Agents, states, sessions, inbound events and the engine step."""

from baf.core.agent import Agent
from baf.core.events import ApprovalEvent, Event, ReceiveFileEvent, ReceiveJSONEvent, ReceiveTextEvent, WildcardEvent
from baf.core.hooks import StepHooks
from baf.core.intent import Intent, IntentParameter, IntentPrediction
from baf.core.intent_classifier import ClassifierAnswer, IntentClassifier, WordOverlapClassifier
from baf.core.runtime import Runtime
from baf.core.session import Session
from baf.core.state import State
from baf.core.transition import Transition

__all__ = [
    "Agent",
    "ApprovalEvent",
    "ClassifierAnswer",
    "Event",
    "Intent",
    "IntentClassifier",
    "IntentParameter",
    "IntentPrediction",
    "ReceiveFileEvent",
    "ReceiveJSONEvent",
    "ReceiveTextEvent",
    "Runtime",
    "Session",
    "State",
    "StepHooks",
    "Transition",
    "WildcardEvent",
    "WordOverlapClassifier",
]
