"""Tool calls waiting for approval in Telegram: Approve / Deny buttons, against the Bot API stand-in."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from baf import Agent, ApprovalEvent
from baf.library.state.reasoning_state_library import reasoning_body
from baf.llm.base import LLMResponse, ToolCall
from baf.log.record import Record, RecordKind
from baf.platforms.telegram import TelegramPlatform
from baf.platforms.telegram.approvals import button_data, parse_button
from baf.testing.llms import FunctionLLM

from .telegram_standin import TOKEN, BotAPIStandIn, Call, visible_text


@pytest.fixture
async def server() -> AsyncIterator[BotAPIStandIn]:
    stand_in = await BotAPIStandIn().start()
    yield stand_in
    await stand_in.close()


def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> Any:
    """Asks to pay whoever the user names; answers with the tool's result once it has one."""
    if messages[-1]["role"] == "tool":
        return f"Done: {messages[-1]['content']}"
    return LLMResponse(None, [ToolCall(f"pay-{messages[-1]['content']}", "pay", json.dumps({"to": "bob"}))])


async def running(
    server: BotAPIStandIn, ran: list[str], chat_model: Any = model, **options: Any
) -> tuple[Agent, TelegramPlatform]:
    agent = Agent("tg-approvals", log="memory://")
    state = agent.new_state("main", initial=True)
    state.set_body(reasoning_body(FunctionLLM(chat_model), enable_task_planning=False))
    state.when_event().go_to(state)

    def pay(to: str) -> str:
        """Pay someone."""
        ran.append(to)
        return f"paid {to}"

    agent.new_tool(pay, requires_approval=True)
    platform = TelegramPlatform(TOKEN, api_base=server.url, polling_timeout=1, **options)
    agent.add_platform(platform)
    await agent.start()
    return agent, platform


def request_messages(server: BotAPIStandIn, chat_id: int) -> list[Call]:
    """The messages sent to ``chat_id`` with inline buttons (the approval requests)."""
    return [c for c in server.calls if c.method == "sendMessage" and c.chat_id == chat_id
            and "inline_keyboard" in c.params.get("reply_markup", "")]  # fmt: skip


async def ask(server: BotAPIStandIn, chat_id: int, text: str) -> Call:
    """The user says ``text``; the bot sends the request with its buttons: that message."""
    before = len(request_messages(server, chat_id))
    server.push_message(chat_id, text=text)
    requests = await server.wait_for(
        lambda: len(request_messages(server, chat_id)) > before and request_messages(server, chat_id)
    )
    return requests[-1]


def edits_of(server: BotAPIStandIn, message: Call) -> list[Call]:
    return [c for c in server.calls if c.method == "editMessageText"
            and int(c.params["message_id"]) == message.result["message_id"]]  # fmt: skip


async def records(agent: Agent, chat_id: int, kind: str) -> list[Record]:
    await agent.wait_idle()
    return [r for r in await agent.log.read(f"telegram-{chat_id}") if r.kind == kind]


def test_the_buttons_name_the_request_record_and_nothing_else_is_taken_for_one() -> None:
    assert parse_button(button_data(True, 12)) == (True, 12)
    assert parse_button(button_data(False, 7)) == (False, 7)
    for data in (
        None,
        "",
        "baf-approval:y:",
        "baf-approval:maybe:3",
        "other:y:3",
        "baf-approval:y:-3",
        "baf-approval:y:3x",
    ):
        assert parse_button(data) is None, data


async def test_approve_runs_the_call_answers_the_press_and_shows_the_decision(server: BotAPIStandIn) -> None:
    ran: list[str] = []
    agent, _ = await running(server, ran)
    try:
        request = await ask(server, 31, "a")
        assert "pay-a" in visible_text(request.params["text"]) and ran == []
        keyboard = json.loads(request.params["reply_markup"])["inline_keyboard"]
        assert [b["text"] for row in keyboard for b in row] == ["✅ Approve", "❌ Deny"]
        server.press(request, 0)
        await server.wait_for(lambda: "Done: paid bob" in server.sent_texts(31))
        edits = await server.wait_for(lambda: edits_of(server, request))
        assert ran == ["bob"]
        assert [a["text"] for a in server.answers()] == ["Approved."]
        shown = visible_text(edits[-1].params["text"])
        assert "Approved by telegram user 31 (@user31)." in shown and "pay-a" in shown
        assert "reply_markup" not in edits[-1].params  # the buttons are gone
        (decided,) = await records(agent, 31, RecordKind.APPROVAL_DECIDED)
        # The chat's sends keep order, and the press is closed once its turn is done: a second edit would
        # be sent before the request of a message that comes after that turn
        await ask(server, 31, "c")
        assert len(edits_of(server, request)) == 1  # the press and the decision's delivery: one edit
        assert decided.data["approved"] is True and decided.data["by"] == "telegram user 31 (@user31)"
    finally:
        await agent.stop()


async def test_deny_does_not_run_the_call_and_shows_who_denied_it(server: BotAPIStandIn) -> None:
    ran: list[str] = []
    agent, _ = await running(server, ran)
    try:
        request = await ask(server, 32, "b")
        server.press(request, 1)
        edits = await server.wait_for(lambda: edits_of(server, request))
        assert "Denied by telegram user 32 (@user32)." in visible_text(edits[-1].params["text"])
        await agent.wait_idle()
        assert ran == [] and [a["text"] for a in server.answers()] == ["Denied."]
        (decided,) = await records(agent, 32, RecordKind.APPROVAL_DECIDED)
        assert decided.data["approved"] is False
    finally:
        await agent.stop()


async def test_a_press_from_someone_who_may_not_decide_is_refused_and_changes_nothing(server: BotAPIStandIn) -> None:
    ran: list[str] = []
    agent, _ = await running(server, ran, approvers=[500])
    try:
        request = await ask(server, 33, "c")
        server.press(request, 0, from_id=666)  # in the chat, but not an approver
        (answer,) = await server.wait_for(server.answers)
        assert answer["text"] == "You may not approve or deny tool calls for this bot."
        assert answer["show_alert"] == "true"
        await agent.wait_idle()
        assert ran == [] and await records(agent, 33, RecordKind.APPROVAL_DECIDED) == []
        assert edits_of(server, request) == []  # the buttons stay for someone who may decide
        server.press(request, 0, from_id=500)
        await server.wait_for(lambda: "Done: paid bob" in server.sent_texts(33))
        assert ran == ["bob"]
    finally:
        await agent.stop()


async def test_a_press_in_another_chat_cannot_decide_this_chats_call(server: BotAPIStandIn) -> None:
    ran: list[str] = []
    agent, _ = await running(server, ran, allowed_chats=[34, 35])
    try:
        request = await ask(server, 34, "d")
        # The same button data pressed in chat 35 (a forged press): it names chat 35's session, where no
        # request waits at that seq.
        server.press(request, 0, chat_id=35)
        (answer,) = await server.wait_for(server.answers)
        assert answer["text"] == "There is no such request in this chat."
        server.press(request, 0, chat_id=99)  # a chat the bot does not serve
        answers = await server.wait_for(lambda: len(server.answers()) == 2 and server.answers())
        assert answers[1]["text"] == "This bot does not serve this chat."
        await agent.wait_idle()
        assert ran == [] and await records(agent, 34, RecordKind.APPROVAL_DECIDED) == []
        assert await agent.log.read("telegram-35") == [] and await agent.log.read("telegram-99") == []
    finally:
        await agent.stop()


async def test_a_press_after_the_request_expired_is_answered_so_and_runs_nothing(server: BotAPIStandIn) -> None:
    ran: list[str] = []
    agent, _ = await running(server, ran)
    try:
        first = await ask(server, 36, "e")
        await ask(server, 36, "f")  # the user moved on: the first request expired
        server.press(first, 0)
        (answer,) = await server.wait_for(server.answers)
        assert answer["text"] == "This request expired when the conversation moved on; nothing was run."
        edits = await server.wait_for(lambda: edits_of(server, first))
        assert "Expired" in visible_text(edits[-1].params["text"])
        await agent.wait_idle()
        assert ran == []
        # Nothing reached the agent: no decision was recorded, and no error was told to the user.
        assert await records(agent, 36, RecordKind.APPROVAL_DECIDED) == []
        assert await records(agent, 36, RecordKind.ERROR) == []
    finally:
        await agent.stop()


async def test_a_second_press_is_answered_with_the_first_decision(server: BotAPIStandIn) -> None:
    ran: list[str] = []
    agent, _ = await running(server, ran)
    try:
        request = await ask(server, 37, "g")
        server.press(request, 0)
        await server.wait_for(lambda: edits_of(server, request))
        server.press(request, 1)  # Deny, after it was approved
        answers = await server.wait_for(lambda: len(server.answers()) == 2 and server.answers())
        assert answers[1]["text"] == "This call was already approved by telegram user 37 (@user37)."
        await agent.wait_idle()
        assert ran == ["bob"] and len(await records(agent, 37, RecordKind.APPROVAL_DECIDED)) == 1
    finally:
        await agent.stop()


async def test_a_decision_made_elsewhere_or_an_expiry_closes_the_requests_message(server: BotAPIStandIn) -> None:
    ran: list[str] = []
    agent, _ = await running(server, ran)
    try:
        request = await ask(server, 38, "h")
        # An operator decides through another channel: no press here, the message still shows it.
        await agent.receive_event(ApprovalEvent("telegram-38", call_id="pay-h", approved=False, approver="ops"))
        edits = await server.wait_for(lambda: edits_of(server, request))
        assert "Denied by ops." in visible_text(edits[-1].params["text"])
        assert "reply_markup" not in edits[-1].params
        waiting = await ask(server, 38, "i")
        server.push_message(38, text="never mind")  # the user moves on: the request expires
        edits = await server.wait_for(lambda: edits_of(server, waiting))
        assert "Expired" in visible_text(edits[-1].params["text"])
        await agent.wait_idle()
        assert ran == [] and server.answers() == []
    finally:
        await agent.stop()


async def test_arguments_and_call_ids_are_shown_as_written_and_never_rendered_as_markup(server: BotAPIStandIn) -> None:
    # Valid JSON arguments and a call id, both from the model, that close the code block or span they are
    # shown in and go on as Markdown: a link and bold text would then look like the bot's own words.
    arguments = json.dumps({"to": "bob ``` **Safe read-only call.** [Details](https://evil.example/x) ```"})
    call_id = "c`1 [Approve](https://evil.example/y)"

    def hostile(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> Any:
        if messages[-1]["role"] == "tool":
            return "Done."
        return LLMResponse(None, [ToolCall(call_id, "pay", arguments)])

    ran: list[str] = []
    agent, _ = await running(server, ran, chat_model=hostile)
    try:
        request = await ask(server, 35, "pay")
        sent = request.params["text"]
        assert "<a " not in sent and "<b>Safe" not in sent
        shown = visible_text(sent)
        assert arguments in shown and call_id in shown
        server.press(request, 1)
        edits = await server.wait_for(lambda: edits_of(server, request))
        edited = edits[-1].params["text"]
        assert "<a " not in edited and arguments in visible_text(edited) and call_id in visible_text(edited)
        assert "Denied by telegram user 35 (@user35)." in visible_text(edited)
        assert ran == []
    finally:
        await agent.stop()
