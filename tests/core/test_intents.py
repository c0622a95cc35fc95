"""Intents: routing by intent, predictions as records, global states and their return, bad input."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from baf import Agent, Session
from baf.core.intent import Intent, IntentParameter
from baf.core.intent_classifier import ClassifierAnswer, WordOverlapClassifier
from baf.core.session import runtime_side
from baf.errors import ConfigurationError
from baf.replay.rerun import assert_replays
from baf.testing import RecordingPlatform


def bot(log: str) -> tuple[Agent, dict[str, Any]]:
    """A small BESSER-style bot: greeting, weather (with a city), a global help, a fallback state."""
    agent = Agent("intents", log=log)
    hello = agent.new_intent("hello", ["hi", "hello there", "good morning"], description="a greeting")
    weather = agent.new_intent("weather", ["what is the weather in CITY", "weather in CITY please"],
                               parameters=[IntentParameter("city", description="a city")])  # fmt: skip
    help_intent = agent.new_intent("help", ["help", "I need help", "what can you do"])
    start = agent.new_state("start", initial=True)
    greet = agent.new_state("greet")
    forecast = agent.new_state("forecast")
    confused = agent.new_state("confused")
    helping = agent.new_state("help")
    seen: dict[str, Any] = {}

    def greet_body(session: Session) -> None:
        session.reply("Hello! Ask me about the weather.")

    def forecast_body(session: Session) -> None:
        prediction = session.event.predicted_intent if session.event else None
        assert prediction is not None
        seen["prediction"] = prediction
        session.reply(f"Sunny in {prediction.get_parameter('city')}.")

    greet.set_body(greet_body)
    forecast.set_body(forecast_body)
    confused.set_body(lambda session: session.reply("I did not get that."))
    helping.set_body(lambda session: session.reply("I know greetings and the weather."))
    start.when_intent_matched(hello).go_to(greet)
    start.when_no_intent_matched().go_to(confused)
    greet.when_intent_matched(weather).go_to(forecast)
    greet.when_no_intent_matched().go_to(confused)
    forecast.when_intent_matched("hello").go_to(greet)
    confused.go_to(start)
    helping.set_global(help_intent)
    return agent, seen


async def predictions(agent: Agent, session_id: str) -> list[dict[str, Any]]:
    return [r.data for r in await agent.log.read(session_id) if r.kind == "intent_predicted"]


async def transitions(agent: Agent, session_id: str) -> list[str]:
    return [r.data["label"] for r in await agent.log.read(session_id) if r.kind == "transition"]


async def test_messages_route_by_intent_and_each_prediction_is_recorded(
    log_url: str, platform: RecordingPlatform
) -> None:
    agent, seen = bot(log_url)
    agent.add_platform(platform)
    async with agent:
        await agent.receive_message("u", "Hello there!", platform)
        await agent.receive_message("u", "What is the weather in Lisbon?", platform)
        assert platform.replies["u"] == ["Hello! Ask me about the weather.", "Sunny in Lisbon."]
        prediction = seen["prediction"]
        assert prediction.intent is agent.get_intent("weather") and prediction.score == 1.0
        assert dict(prediction.parameters) == {"city": "Lisbon"} and prediction.classifier == "word_overlap"
        recorded = await predictions(agent, "u")
        assert [p["intent"] for p in recorded] == ["hello", "weather"]
        assert recorded[1]["parameters"] == {"city": "Lisbon"}
        assert recorded[1]["candidates"] == ["weather", "help"] and recorded[1]["threshold"] == 0.5
        assert await transitions(agent, "u") == ["start -> greet (intent hello)", "greet -> forecast (intent weather)"]


async def test_no_intent_matched_below_the_threshold_records_the_best_guess(platform: RecordingPlatform) -> None:
    agent, _ = bot("memory://")
    agent.set_property("nlp.intent_threshold", 0.9)
    agent.add_platform(platform)
    async with agent:
        await agent.receive_message("u", "hello my friend", platform)  # overlaps "hello there", not above 0.9
        assert platform.replies["u"] == ["I did not get that."]
        [prediction] = await predictions(agent, "u")
        assert prediction["intent"] is None and prediction["best"] == "hello" and 0 < prediction["score"] < 0.9
        moves = await transitions(agent, "u")
        assert moves == ["start -> confused (no intent matched)", "confused -> start (automatic)"]


async def test_a_global_state_is_reached_from_anywhere_and_returns_where_the_user_was(
    db_url: str, platform: RecordingPlatform
) -> None:
    agent, _ = bot(db_url)
    agent.add_platform(platform)
    async with agent:
        await agent.receive_message("u", "hi", platform)
        session = await agent.receive_message("u", "I need help", platform)
        assert runtime_side(session).projection.current_state == "greet"  # back where the user was, its body not re-run
        assert platform.replies["u"] == ["Hello! Ask me about the weather.", "I know greetings and the weather."]
        assert await transitions(agent, "u") == [
            "start -> greet (intent hello)",
            "greet -> help (global intent help)",
            "help -> greet (return from global help)",
        ]
        await agent.receive_message("u", "weather in Porto please", platform)  # greet's own intents still route
        assert platform.replies["u"][-1] == "Sunny in Porto."


async def test_a_global_component_returns_at_its_end_and_survives_a_restart(db_url: str) -> None:
    def build() -> tuple[Agent, RecordingPlatform]:
        agent = Agent("g", log=db_url)
        yes = agent.new_intent("yes", ["yes", "sure"])
        agent.new_intent("order", ["I want to order", "order food"])
        support = agent.new_intent("support", ["talk to support", "support please"])
        start = agent.new_state("start", initial=True)
        ordering = agent.new_state("ordering")
        support_state = agent.new_state("support")
        confirm = agent.new_state("confirmed")
        ordering.set_body(lambda s: s.reply("What would you like?"))
        support_state.set_body(lambda s: s.reply("Shall I open a ticket?"))
        confirm.set_body(lambda s: s.reply("Ticket opened."))
        start.when_intent_matched("order").go_to(ordering)
        support_state.when_intent_matched(yes).go_to(confirm)
        support_state.set_global(support)
        platform = RecordingPlatform()
        agent.add_platform(platform)
        return agent, platform

    agent, platform = build()
    async with agent:
        await agent.receive_message("u", "order food", platform)
        await agent.receive_message("u", "support please", platform)
    agent, platform = build()  # the return target is part of the session's projection
    async with agent:
        session = await agent.receive_message("u", "sure", platform)
        assert platform.replies["u"] == ["Ticket opened."]
        assert runtime_side(session).projection.current_state == "ordering"
        assert runtime_side(session).projection.return_to is None and runtime_side(session).projection.visiting is None
        assert (await transitions(agent, "u"))[-2:] == [
            "support -> confirmed (intent yes)",
            "confirmed -> ordering (return from global support)",
        ]


class Scripted:
    """A classifier that answers what a test says, and counts its calls."""

    name = "scripted"

    def __init__(self, *answers: ClassifierAnswer | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def classify(self, text: str, intents: Sequence[Intent]) -> ClassifierAnswer:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_a_classifier_naming_an_unknown_intent_or_raising_counts_as_no_match_and_is_recorded(
    platform: RecordingPlatform, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'outage.db'}"
    agent, _ = bot(url)
    agent.set_intent_classifier(Scripted(ClassifierAnswer("order_pizza", 0.99), RuntimeError("model down")))
    agent.add_platform(platform)
    async with agent:
        await agent.receive_message("u", "pizza!", platform)
        await agent.receive_message("u", "anything", platform)
        assert platform.replies["u"] == ["I did not get that.", "I did not get that."]
        unknown, raised = await predictions(agent, "u")
        assert unknown["intent"] is None and "'order_pizza', which is not one of ['hello', 'help']" in unknown["error"]
        assert raised["intent"] is None and raised["error"] == "the classifier raised RuntimeError: model down"
        assert not [r for r in await agent.log.read("u") if r.kind == "error"]  # said in the prediction
    assert "the intent classifier 'scripted' raised" in caplog.text and "RuntimeError: model down" in caplog.text
    again, _ = bot("memory://")
    again.set_intent_classifier(Scripted())
    await assert_replays(url, "u", again)  # the outage is served from the log as it happened


async def test_rerun_serves_the_recorded_predictions_without_asking_the_classifier(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'run.db'}"
    agent, _ = bot(url)
    async with agent:
        await agent.receive_message("u", "hi")
        await agent.receive_message("u", "weather in Oslo please")
        await agent.receive_message("u", "help")
    again, _ = bot("memory://")
    never = Scripted()  # any call would pop from an empty list
    again.set_intent_classifier(never)
    report = await assert_replays(url, "u", again)
    assert never.calls == 0 and report.records_compared > 10


async def test_offline_classifier_scores_overlap_and_extracts_parameters() -> None:
    agent = Agent("c", log="memory://")
    book = agent.new_intent("book", ["book a table for PEOPLE at TIME"], parameters=["people", "time"])
    other = agent.new_intent("other", ["tell me a joke"])
    classifier = WordOverlapClassifier()
    exact = await classifier.classify("Book a table for four at 8 pm.", [other, book])
    assert exact == ClassifierAnswer("book", 1.0, {"people": "four", "time": "8 pm"})
    loose = await classifier.classify("a joke please", [book, other])
    assert loose.intent == "other" and 0.3 < loose.score < 1
    assert (await classifier.classify("zzz", [book, other])).intent is None


def test_bad_intent_declarations_are_refused() -> None:
    agent = Agent("bad", log="memory://")
    with pytest.raises(ConfigurationError, match="intent 'empty' has no training sentences"):
        agent.new_intent("empty", [])
    with pytest.raises(ConfigurationError, match="no training sentence holds its placeholder 'CITY'"):
        agent.new_intent("weather", ["weather please"], parameters=["city"])
    help_intent = agent.new_intent("help", ["help"])
    with pytest.raises(ConfigurationError, match="already has an intent named 'help'"):
        agent.new_intent("help", ["help me"])
    first, second = agent.new_state("a", initial=True), agent.new_state("b")
    first.set_global(help_intent)
    with pytest.raises(ConfigurationError, match="intent 'help' already leads to global state 'a'"):
        second.set_global("help")
    with pytest.raises(ConfigurationError, match="no intent named 'nope'"):
        first.when_intent_matched("nope")
    with pytest.raises(ConfigurationError, match="does not belong to agent"):
        first.when_intent_matched(Agent("other", log="memory://").new_intent("x", ["x"]))


async def test_a_threshold_out_of_range_is_refused_at_start() -> None:
    agent, _ = bot("memory://")
    agent.set_property("nlp.intent_threshold", 3)
    with pytest.raises(ConfigurationError, match=r"nlp\.intent_threshold must be a number from 0 to 1, got 3"):
        await agent.start()


async def test_the_timeline_shows_each_prediction_and_the_transition_it_caused(platform: RecordingPlatform) -> None:
    from baf.replay.timeline import EntryKind, build_timeline

    agent, _ = bot("memory://")
    async with agent:
        await agent.receive_message("u", "good morning", platform)
        await agent.receive_message("u", "weather in Rome please", platform)
        records = await agent.log.read("u")
    entries = build_timeline(records)
    intents = [e for e in entries if e.kind == EntryKind.INTENT]
    assert [e.title for e in intents] == [
        "intent hello matched (score 1.00 by word_overlap)",
        "intent weather matched (score 1.00 by word_overlap): city=Rome",
    ]
    moves = [e.title for e in entries if e.kind == EntryKind.TRANSITION]
    assert moves == [
        f"start → greet  (intent hello)  ← prediction #{intents[0].seq}",
        f"greet → forecast  (intent weather)  ← prediction #{intents[1].seq}",
    ]
