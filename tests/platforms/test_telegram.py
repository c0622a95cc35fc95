"""The Telegram platform against a local stand-in of the Bot API (tests/platforms/telegram_standin.py)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from baf import Agent
from baf.core.events import ReceiveFileEvent
from baf.core.session import Session, runtime_side
from baf.errors import ConfigurationError
from baf.platforms import Platform
from baf.platforms.telegram import TelegramPlatform
from baf.platforms.telegram.markup import render_html, split_message, utf16_length
from baf.testing.platform_contract import ContractClient, Output, PlatformContract

from .telegram_standin import TOKEN, BotAPIStandIn, Call, visible_text

_chat_ids = itertools.count(1001)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# -- the contract ---------------------------------------------------------------------------------


class TelegramClient(ContractClient):
    """One Telegram user: sends through the stand-in's updates, reads what the bot sent to its chat."""

    def __init__(self, server: BotAPIStandIn, chat_id: int) -> None:
        self.server = server
        self.chat_id = chat_id
        self._seen = 0

    async def send(self, text: str) -> None:
        self.server.push_message(self.chat_id, text=text)

    def _outputs(self) -> list[Call]:
        shown = ("sendMessage", "editMessageText", "sendDocument", "sendPhoto")
        return [c for c in self.server.calls if c.chat_id == self.chat_id and c.method in shown]

    async def next_output(self, wait: float) -> Output:
        calls = await self.server.wait_for(lambda: self._outputs()[self._seen :] or None, wait)
        call = calls[0]
        self._seen += 1
        if call.method != "sendMessage" or call.params.get("disable_notification") == "true":
            return Output("other", "", call)  # the status message and its edits, files, photos
        return Output("reply", visible_text(call.params["text"]), call)

    async def decide(self, call_id: str, approved: bool, reason: str = "") -> bool:
        """Press the request's Approve or Deny button (Telegram's buttons carry no reason)."""
        (request,) = [c for c in self.server.calls if c.method == "sendMessage" and c.chat_id == self.chat_id
                      and "inline_keyboard" in c.params.get("reply_markup", "")
                      and call_id in visible_text(c.params["text"])]  # fmt: skip
        self.server.press(request, 0 if approved else 1)
        return True


class TestTelegramPlatform(PlatformContract):
    server: BotAPIStandIn

    @pytest.fixture(autouse=True)
    async def _stand_in(self) -> AsyncIterator[None]:
        self.server = await BotAPIStandIn().start()
        yield
        await self.server.close()

    def make_platform(self) -> Platform:
        return TelegramPlatform(TOKEN, api_base=self.server.url, polling_timeout=1, step_edit_interval=0.05)

    async def open_client(self, agent: Agent, platform: Platform) -> ContractClient:
        return TelegramClient(self.server, next(_chat_ids))


# -- helpers ----------------------------------------------------------------------------------------


def _echo(session: Session) -> None:
    event = session.event
    if isinstance(event, ReceiveFileEvent):
        session.reply(f"got {event.name} ({len(event.content)} bytes, {event.mime_type}): {event.caption}")
    elif event is not None and event.text is not None:
        session.reply(f"echo: {event.text}")


async def _running(
    server: BotAPIStandIn, body: Callable[[Session], Any] = _echo, **options: Any
) -> tuple[Agent, TelegramPlatform]:
    agent = Agent("tg", log=options.pop("log", "memory://"))
    state = agent.new_state("main", initial=True)
    state.set_body(body)
    state.when_event().go_to(state)
    options.setdefault("polling_timeout", 1)
    platform = TelegramPlatform(TOKEN, api_base=server.url, **options)
    agent.add_platform(platform)
    await agent.start()
    return agent, platform


@pytest.fixture
async def server() -> AsyncIterator[BotAPIStandIn]:
    stand_in = await BotAPIStandIn().start()
    yield stand_in
    await stand_in.close()


async def _messages(agent: Agent, chat_id: int) -> list[Any]:
    await agent.wait_idle()
    return [r.data for r in await agent.log.read(f"telegram-{chat_id}") if r.kind == "message_received"]


# -- markup ---------------------------------------------------------------------------------------


def test_model_and_user_text_is_escaped() -> None:
    shown = render_html('<script>alert(1)</script> & **bold <i>** `a<b` [x](https://e.com/?a="1"&b=2) _x_ *y*')
    assert "<script>" not in shown and "&lt;script&gt;" in shown
    assert "<b>bold &lt;i&gt;</b>" in shown
    assert "<code>a&lt;b</code>" in shown
    assert '<a href="https://e.com/?a=&quot;1&quot;&amp;b=2">x</a>' in shown
    assert "_x_ *y*" in shown  # shown as written: no MarkdownV2 escapes needed in HTML mode
    assert visible_text(render_html("a < b && c > d")) == "a < b && c > d"


def test_code_blocks_render_with_their_language() -> None:
    assert render_html("```python\nx = 1 < 2\n```") == '<pre><code class="language-python">x = 1 &lt; 2</code></pre>'
    # A language that could break out of the attribute is not taken as one: the rest is code text.
    shown = render_html('```bad"><b>lang\nx\n```')
    assert shown == '<pre><code class="language-bad">"&gt;&lt;b&gt;lang\nx</code></pre>'


def test_long_replies_split_at_the_limit_and_code_blocks_stay_closed() -> None:
    text = "\n\n".join(f"paragraph {i} " + "word " * 150 for i in range(12))
    pieces = split_message(text)
    assert len(pieces) > 1 and all(utf16_length(p) <= 4096 for p in pieces)
    assert " ".join(" ".join(pieces).split()) == " ".join(text.split())
    code = "```python\n" + "\n".join(f"line_{i} = {i}" for i in range(800)) + "\n```"
    pieces = split_message(code)
    assert len(pieces) > 1
    for piece in pieces:
        assert piece.count("```") == 2 and piece.startswith("```python"), piece[:40]
        assert utf16_length(piece) <= 4096
    emoji = "😀" * 5000  # two UTF-16 units each: 10,000 units
    assert [utf16_length(p) for p in split_message(emoji)] == [4092, 4092, 1816]


def test_a_malformed_token_is_refused_at_once() -> None:
    with pytest.raises(ConfigurationError, match="malformed"):
        TelegramPlatform("not-a-token")


# -- behaviour --------------------------------------------------------------------------------------


async def test_text_and_commands_reach_the_agent_and_replies_are_html(server: BotAPIStandIn) -> None:
    agent, _ = await _running(server)
    try:
        server.push_message(7, text="/start@baf_test_bot now")
        server.push_message(7, text="/help@other_bot")  # for another bot in the group: left alone
        server.push_message(7, text="1 < 2 & **yes**")
        texts = await server.wait_for(lambda: len(server.sent_texts(7)) >= 2 and server.sent_texts(7))
        assert texts == ["echo: /start now", "echo: 1 < 2 & yes"]
        sent = [c for c in server.calls if c.method == "sendMessage"]
        assert sent[1].params["parse_mode"] == "HTML"
        assert sent[1].params["text"] == "echo: 1 &lt; 2 &amp; <b>yes</b>"
        assert [m["text"] for m in await _messages(agent, 7)] == ["/start now", "1 < 2 & **yes**"]
        assert "sendChatAction" in server.methods(7)  # typing while the step ran
        assert server.methods()[:2] == ["getMe", "deleteWebhook"]  # polling takes over from a webhook
    finally:
        await agent.stop()


async def test_a_long_reply_is_split_into_messages_under_the_limit(server: BotAPIStandIn) -> None:
    long = "\n".join(f"{i:04d} " + "x" * 90 for i in range(100))  # ~9,500 characters

    agent, _ = await _running(server, lambda s: s.event and s.reply(long))
    try:
        server.push_message(8, text="go")
        texts = await server.wait_for(lambda: len(server.sent_texts(8)) >= 3 and server.sent_texts(8))
        await agent.wait_idle()
        assert texts == server.sent_texts(8) and len(texts) == 3 and all(len(t) <= 4096 for t in texts)
        assert "\n".join(texts) == long
    finally:
        await agent.stop()


async def test_photos_and_documents_arrive_as_file_events(server: BotAPIStandIn) -> None:
    server.add_file("doc1", b"hello file")
    server.add_file("small", b"s" * 10)
    server.add_file("big", b"B" * 300)
    agent, _ = await _running(server, max_file_size=100)
    try:
        server.push_message(9, document={"file_id": "doc1", "file_unique_id": "d1", "file_name": "notes.txt",
                                         "mime_type": "text/plain", "file_size": 10}, caption="my notes")  # fmt: skip
        photo = [{"file_id": "small", "file_unique_id": "p1", "width": 90, "height": 90, "file_size": 10},
                 {"file_id": "big", "file_unique_id": "p2", "width": 900, "height": 900, "file_size": 300}]  # fmt: skip
        server.push_message(9, photo=photo)
        texts = await server.wait_for(lambda: len(server.sent_texts(9)) >= 2 and server.sent_texts(9))
        assert texts[0] == "got notes.txt (10 bytes, text/plain): my notes"
        # The largest photo size that fits the limit.
        assert texts[1] == "got photo_p1.jpg (10 bytes, image/jpeg): "
        received = await _messages(agent, 9)
        assert base64.b64decode(received[0]["event"]["data"]) == b"hello file"
        assert received[0]["event"]["type"] == "file"
    finally:
        await agent.stop()


async def test_replies_with_options_files_and_images_use_telegram_features(server: BotAPIStandIn) -> None:
    def body(session: Session) -> None:
        if session.event is None:
            return  # the session's start
        session.reply_options("Pick", ["red", "blue"])
        session.reply_file("a.txt", b"abc", "text/plain", "the **file**")
        session.reply_image(b"\x89PNG\r\n", "image/png", "x" * 1100)  # a caption past 1,024: sent after

    agent, _ = await _running(server, body)
    try:
        server.push_message(10, text="go")
        await server.wait_for(lambda: len(server.sent_texts(10)) >= 2)
        calls = [c for c in server.calls if c.chat_id == 10 and c.method != "sendChatAction"]
        assert [c.method for c in calls] == ["sendMessage", "sendDocument", "sendPhoto", "sendMessage"]
        assert '"one_time_keyboard":true' in calls[0].params["reply_markup"].replace(" ", "")
        assert "red" in calls[0].params["reply_markup"] and "blue" in calls[0].params["reply_markup"]
        assert calls[1].files["document"] == b"abc" and calls[1].params["caption"] == "the <b>file</b>"
        assert calls[2].files["photo"] == b"\x89PNG\r\n" and "caption" not in calls[2].params
        assert calls[3].params["text"] == "x" * 1100
    finally:
        await agent.stop()


async def test_reasoning_steps_edit_one_status_message_rate_limited(server: BotAPIStandIn) -> None:
    from baf.reasoning.step import ReasoningStep

    async def body(session: Session) -> None:
        if session.event is None:
            return  # the session's start
        live = runtime_side(session)  # streams as the reasoning library does
        live.queue_platform_call("reply_reasoning_step", ReasoningStep("reasoning_started", 0, "start"))
        for i in range(30):
            live.queue_platform_call("reply_reasoning_step", ReasoningStep("llm_text", i, f"step <{i}>"))
            await live.commit()
            await asyncio.sleep(0.01)
        live.queue_platform_call("reply_reasoning_step", ReasoningStep("reasoning_finished", 30, "end"))
        session.reply("answer")

    agent, _ = await _running(server, body, step_edit_interval=0.1)
    try:
        server.push_message(11, text="think")

        def final_edit() -> bool:
            return any("Done" in visible_text(c.params["text"]) for c in server.calls if c.chat_id == 11
                       and c.method in ("editMessageText", "sendMessage"))  # fmt: skip

        await server.wait_for(final_edit)
        shown = [c for c in server.calls if c.chat_id == 11 and c.method in ("sendMessage", "editMessageText")]
        status = [c for c in shown if c.params.get("disable_notification") == "true"]
        edits = [c for c in shown if c.method == "editMessageText"]
        assert len(status) == 1, "one status message per reasoning loop"
        assert len({c.params["message_id"] for c in edits}) == 1, "every edit is of the one status message"
        assert 1 <= len(edits) <= 8, f"32 steps in ~0.5 s must not be 32 edits; got {len(edits)}"
        gaps = [b.at - a.at for a, b in itertools.pairwise(edits)]
        assert all(gap >= 0.09 for gap in gaps), gaps
        last = visible_text(edits[-1].params["text"])
        assert "step <29>" in last and "Done" in last  # the last step is always shown, escaped
        assert "answer" in server.sent_texts(11)
    finally:
        await agent.stop()


async def test_webhook_mode_sets_the_webhook_and_checks_its_secret(server: BotAPIStandIn) -> None:
    agent, platform = await _running(server, webhook_url="https://bot.example.com/hook", webhook_port=0,
                                     webhook_secret="s3cret-value")  # fmt: skip
    try:
        assert server.webhook is not None
        assert server.webhook["url"] == "https://bot.example.com/hook"
        assert server.webhook["secret_token"] == "s3cret-value"
        url = f"http://127.0.0.1:{platform.webhook_port}/hook"
        good, bad = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-value"}, {"X-Telegram-Bot-Api-Secret-Token": "wrong"}
        update = {"update_id": 1, "message": server.message(12, text="via webhook")}
        async with aiohttp.ClientSession() as http:
            async with http.post(url, json=update, headers=bad) as resp:
                assert resp.status == 403
            async with http.post(url, data=b"{not json", headers=good) as resp:
                assert resp.status == 400
            async with http.post(url, json=update, headers=good) as resp:
                assert resp.status == 200
        # 200 only once the message is durable in the log.
        assert [m["text"] for m in await _messages(agent, 12)] == ["via webhook"]
        assert await server.wait_for(lambda: server.sent_texts(12)) == ["echo: via webhook"]
        assert "getUpdates" not in server.methods()
    finally:
        await agent.stop()


async def test_an_update_delivered_again_after_a_crash_is_not_handled_twice(
    server: BotAPIStandIn, tmp_path: Path
) -> None:
    # Telegram delivers at least once: a webhook whose 200 never reached it (the process died first) gets
    # the same update again, perhaps after a restart. The log knows it was recorded.
    log = f"sqlite:///{tmp_path / 'bot.db'}"
    update = {"update_id": 41, "message": server.message(13, text="pay the invoice")}
    headers = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-value"}

    async def deliver(*updates: dict[str, Any]) -> Agent:
        agent, platform = await _running(server, log=log, webhook_url="https://bot.example.com/hook",
                                         webhook_port=0, webhook_secret="s3cret-value")  # fmt: skip
        url = f"http://127.0.0.1:{platform.webhook_port}/hook"
        async with aiohttp.ClientSession() as http:
            for each in updates:
                async with http.post(url, json=each, headers=headers) as resp:
                    assert resp.status == 200  # taken (again): Telegram stops sending it
        await agent.wait_idle()
        return agent

    agent = await deliver(update, update)  # a retry while the first delivery is being handled
    try:
        assert [m["text"] for m in await _messages(agent, 13)] == ["pay the invoice"]
        assert (await _messages(agent, 13))[0]["delivery"] == "telegram:123456:41"
    finally:
        await agent.stop()
    # After a restart; the chat's replies keep order: a second reply to 41 would be sent before the next's
    agent = await deliver(update, {"update_id": 42, "message": server.message(13, text="thanks")})
    try:
        assert [m["text"] for m in await _messages(agent, 13)] == ["pay the invoice", "thanks"]
        await server.wait_for(lambda: "echo: thanks" in server.sent_texts(13))
        assert server.sent_texts(13) == ["echo: pay the invoice", "echo: thanks"]
    finally:
        await agent.stop()


async def test_a_rejected_token_fails_the_start_clearly(server: BotAPIStandIn) -> None:
    agent = Agent("tg", log="memory://")
    agent.new_state("main", initial=True)
    agent.add_platform(TelegramPlatform("999:WRONG", api_base=server.url))
    with pytest.raises(ConfigurationError, match="refused the bot token"):
        await agent.start()


# -- bad input --------------------------------------------------------------------------------------


async def test_an_update_of_an_unknown_type_is_skipped(server: BotAPIStandIn, caplog: pytest.LogCaptureFixture) -> None:
    agent, _ = await _running(server)
    try:
        with caplog.at_level(logging.INFO, logger="baf.platforms.telegram"):
            server.push({"brand_new_update_kind": {"what": "ever"}})
            server.push({"message": {"message_id": 1, "chat": "not an object"}})  # malformed: skipped too
            server.push_message(13, text="after")
            assert await server.wait_for(lambda: server.sent_texts(13)) == ["echo: after"]
        assert "of type brand_new_update_kind skipped" in caplog.text
        assert "update 2 is malformed" in caplog.text
        assert await agent.log.sessions() == ["telegram-13"]
    finally:
        await agent.stop()


async def test_a_file_over_the_limit_is_refused_before_download(server: BotAPIStandIn) -> None:
    server.add_file("huge", b"h" * 500)
    server.add_file("liar", b"l" * 500, reported_size=None)  # Telegram did not say its size
    agent, _ = await _running(server, max_file_size=100)
    try:
        server.push_message(14, document={"file_id": "huge", "file_unique_id": "h", "file_size": 500})
        server.push_message(14, document={"file_id": "liar", "file_unique_id": "l"})
        server.push_message(14, text="still here")
        texts = await server.wait_for(lambda: len(server.sent_texts(14)) >= 3 and server.sent_texts(14))
        assert texts[0] == "That file is too large (500 bytes); this bot takes files up to 100 bytes."
        assert texts[1] == "That file is too large (larger than the limit); this bot takes files up to 100 bytes."
        assert texts[2] == "echo: still here"
        files = [c.params["file_id"] for c in server.calls if c.method == "getFile"]
        assert files == ["liar"], "a file announced too large is never fetched"
        assert [m["text"] for m in await _messages(agent, 14)] == ["still here"]
    finally:
        await agent.stop()


async def test_an_edited_message_is_not_applied_and_the_user_is_told(server: BotAPIStandIn) -> None:
    agent, _ = await _running(server)
    try:
        original = server.push_message(15, text="hello")["message"]
        await server.wait_for(lambda: server.sent_texts(15))
        server.push({"edited_message": {**original, "text": "hello, edited", "edit_date": original["date"] + 5}})
        texts = await server.wait_for(lambda: len(server.sent_texts(15)) >= 2 and server.sent_texts(15))
        assert texts[1].startswith("I read messages once")
        assert [m["text"] for m in await _messages(agent, 15)] == ["hello"]
    finally:
        await agent.stop()


async def test_a_chat_not_on_the_allow_list_is_refused_and_nothing_is_recorded(server: BotAPIStandIn) -> None:
    agent, _ = await _running(server, allowed_chats=[16])
    try:
        server.push_message(666, text="let me in")
        server.push_message(16, text="hi")
        assert await server.wait_for(lambda: server.sent_texts(16)) == ["echo: hi"]
        assert await server.wait_for(lambda: server.sent_texts(666)) == ["This bot does not serve this chat."]
        assert await agent.log.sessions() == ["telegram-16"]
    finally:
        await agent.stop()


async def test_429_retry_after_is_honoured(server: BotAPIStandIn) -> None:
    server.fail("sendMessage", times=2, retry_after=1)
    agent, _ = await _running(server)
    try:
        server.push_message(17, text="one")
        server.push_message(17, text="two")
        texts = await server.wait_for(lambda: len(server.sent_texts(17)) >= 2 and server.sent_texts(17), 10)
        assert texts == ["echo: one", "echo: two"], "order kept through the retries"
        attempts = [c.at for c in server.calls if c.method == "sendMessage"]
        assert attempts[1] - attempts[0] >= 0.95 and attempts[2] - attempts[1] >= 0.95
        # The agent did not wait for Telegram: both messages were handled before the first reply left.
        records = await agent.log.read("telegram-17")
        assert [r.data["text"] for r in records if r.kind == "reply"] == ["echo: one", "echo: two"]
    finally:
        await agent.stop()


async def test_a_429_storm_gives_up_on_a_send_and_the_chat_goes_on(
    server: BotAPIStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    server.fail("sendMessage", times=50, retry_after=1)
    agent, _ = await _running(server, max_retries=1)
    try:
        server.push_message(18, text="lost in the storm")
        await server.wait_for(lambda: len([c for c in server.calls if c.method == "sendMessage"]) >= 2)
        server._failures.clear()  # the storm ends
        server.push_message(18, text="after the storm")
        assert await server.wait_for(lambda: server.sent_texts(18)[-1:] == ["echo: after the storm"])
        # the chat's sends keep order: the first was given up before this one went
        assert "gave up on a message after 2 attempts" in caplog.text
        # A retry_after longer than max_retry_after is not waited for at all.
        server.fail("sendMessage", times=1, retry_after=3600)
        server.push_message(18, text="blocked")
        server.push_message(18, text="next")
        assert await server.wait_for(lambda: server.sent_texts(18)[-1:] == ["echo: next"], 3)
        replies = [r.data["text"] for r in await agent.log.read("telegram-18") if r.kind == "reply"]
        assert replies == ["echo: lost in the storm", "echo: after the storm", "echo: blocked", "echo: next"]
    finally:
        await agent.stop()


# -- the example --------------------------------------------------------------------------------------


async def test_the_example_bot_keeps_notes_across_a_restart(server: BotAPIStandIn, tmp_path: Any) -> None:
    import importlib.util

    path = EXAMPLES / "telegram_bot.py"
    spec = importlib.util.spec_from_file_location("examples_telegram_bot", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    server.add_file("f1", b"%PDF-1.4 tiny")
    log = f"sqlite:///{tmp_path / 'notes.db'}"

    agent = example.build_agent(TOKEN, log=log, api_base=server.url, allowed_chats=[21])
    assert isinstance(agent.find_platform("telegram"), TelegramPlatform)
    async with agent:
        server.push_message(21, text="buy milk")
        server.push_message(21, document={"file_id": "f1", "file_unique_id": "x", "file_name": "a.pdf"}, caption="tax")
        await server.wait_for(lambda: len(server.sent_texts(21)) >= 2)
    async with example.build_agent(TOKEN, log=log, api_base=server.url, allowed_chats=[21]):
        server.push_message(21, text="/list")
        texts = await server.wait_for(lambda: len(server.sent_texts(21)) >= 3 and server.sent_texts(21))
    assert texts == ["Noted (1 so far).", "Kept a.pdf.", "1. buy milk\n2. file a.pdf (13 bytes): tax"]


async def test_a_reply_after_the_bot_stopped_is_not_sent_and_says_so(
    server: BotAPIStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    agent, platform = await _running(server)
    async with agent:
        session = await agent.receive_message("telegram-30", "hi")
        await platform.stop()  # as agent.stop() does before the last steps end
        await platform.reply(session, "too late")
    assert "the bot is stopped; a message was not sent (the log keeps it)" in caplog.text
    assert "too late" not in server.sent_texts(30)
