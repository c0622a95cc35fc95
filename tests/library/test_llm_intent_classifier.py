"""The LLM intent classifier: one call per message, JSON answers, bad answers recorded as no match."""

from __future__ import annotations

import json
from typing import Any

from llm.fake_openai_server import completion, serve

from baf import Agent, Session
from baf.core.session import runtime_side
from baf.library.intents import LLMIntentClassifier
from baf.llm.openai_llm import LLMOpenAI
from baf.testing import RecordingPlatform, ScriptedLLM


def shop(llm: Any, platform: RecordingPlatform) -> Agent:
    agent = Agent("shop", log="memory://")
    agent.set_property("nlp.intent_threshold", 0.6)
    order = agent.new_intent("order", ["I want AMOUNT pizzas", "order AMOUNT pizzas"], parameters=["amount"],
                             description="the user orders pizza")  # fmt: skip
    agent.new_intent("hours", ["when are you open"], description="opening hours")
    start = agent.new_state("start", initial=True)
    ordered = agent.new_state("ordered")
    lost = agent.new_state("lost")

    def ordered_body(session: Session) -> None:
        prediction = session.event.predicted_intent if session.event else None
        assert prediction is not None
        session.reply(f"{prediction.get_parameter('amount')} pizzas coming")

    ordered.set_body(ordered_body)
    lost.set_body(lambda s: s.reply("Sorry?"))
    start.when_intent_matched(order).go_to(ordered)
    start.when_intent_matched("hours").go_to(start)
    start.when_no_intent_matched().go_to(lost)
    ordered.go_to(start)
    lost.go_to(start)
    agent.set_intent_classifier(LLMIntentClassifier(llm))
    agent.add_platform(platform)
    return agent


async def predictions(agent: Agent) -> list[dict[str, Any]]:
    return [r.data for r in await agent.log.read("u") if r.kind == "intent_predicted"]


async def test_one_model_call_shows_the_candidates_and_routes_on_the_json_answer(platform: RecordingPlatform) -> None:
    llm = ScriptedLLM(['{"intent": "order", "score": 0.9, "parameters": {"amount": "three"}}'])
    agent = shop(llm, platform)
    async with agent:
        await agent.receive_message("u", "three pizzas please, quickly", platform)
        assert platform.replies["u"] == ["three pizzas coming"]
        [prediction] = await predictions(agent)
    assert prediction["intent"] == "order" and prediction["classifier"] == "llm" and prediction["score"] == 0.9
    [request] = llm.requests
    sent = request.messages[0]["content"]
    assert "three pizzas please, quickly" in sent and "the user orders pizza" in sent and "when are you open" in sent
    assert request.system_message and "classify" in request.system_message


async def test_unknown_intent_malformed_json_and_low_scores_are_no_match_and_recorded(
    platform: RecordingPlatform,
) -> None:
    llm = ScriptedLLM([
        '{"intent": "refund", "score": 0.95, "parameters": {}}',
        "I think the user wants pizza",
        '{"intent": "order", "score": 0.3}',
        '```json\n{"intent": null, "score": 0.8}\n```',
    ])  # fmt: skip
    agent = shop(llm, platform)
    async with agent:
        for text in ("money back", "pizza?", "hmm", "the weather"):
            await agent.receive_message("u", text, platform)
        assert platform.replies["u"] == ["Sorry?"] * 4
        unknown, malformed, low, none = await predictions(agent)
    assert unknown["intent"] is None and "'refund', which is not one of ['hours', 'order']" in unknown["error"]
    assert malformed["intent"] is None and "not the JSON asked for" in malformed["error"]
    assert malformed["raw"] == "I think the user wants pizza"
    assert low["intent"] is None and low["best"] == "order" and low["threshold"] == 0.6
    assert none["intent"] is None and "error" not in none and "best" not in none


async def test_over_real_http_with_a_native_json_schema(platform: RecordingPlatform) -> None:
    answer = {"intent": "hours", "score": 0.99, "parameters": {}}
    with serve() as server:
        server.script(completion(json.dumps(answer)))
        llm = LLMOpenAI("fake-model", base_url=server.base_url, api_key="test-key-123456")
        agent = shop(llm, platform)
        agent.set_intent_classifier(LLMIntentClassifier(llm, native_json=True))
        async with agent:
            session = await agent.receive_message("u", "are you open on sunday?", platform)
            assert runtime_side(session).projection.current_state == "start"
            [prediction] = await predictions(agent)
        [request] = server.requests
    assert prediction["intent"] == "hours"
    assert request.body["response_format"]["type"] == "json_schema"
