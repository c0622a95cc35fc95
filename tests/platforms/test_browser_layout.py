"""The browser UI as a user sees it on a phone and on a desktop (headless Chromium, Playwright): the page
itself never scrolls away from its header and composer, tasks sit above the chat on a phone, tables keep
their numbers whole, and a message the agent did not take is said so, its text kept. Never skips (see
test_browser_ui.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from playwright.async_api import Page, async_playwright, expect

from baf.core.session import Session
from baf.platforms.limits import ClientLimits
from baf.platforms.websocket import WebSocketPlatform
from baf.testing import ScriptedLLM

from .helpers import body_agent, reasoning_agent
from .test_browser_ui import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_chromium

TABLE_ANSWER = (
    "**North America** brought in the most revenue: $1,750,900 of $4,594,700 (38.1%).\n\n"
    "| Region | 2024-Q1 | 2024-Q4 | Revenue | Share | Growth |\n|---|---:|---:|---:|---:|---:|\n"
    "| North America | $412,500 | $468,300 | $1,750,900 | 38.1% | +13.5% |\n"
    "| Europe | $298,400 | $351,900 | $1,278,100 | 27.8% | +17.9% |\n"
    "| Middle East & Africa | $58,900 | $66,100 | $245,600 | 5.3% | +12.2% |\n\n" + "More detail follows. " * 60
)


def table_script() -> ScriptedLLM:
    """Plan two tasks, tick them off, answer with a table and a long paragraph."""
    return ScriptedLLM(
        [
            ScriptedLLM.tool_call("add_tasks", {"descriptions": ["Total the revenue per region", "Work out shares"]}),
            ScriptedLLM.tool_call("complete_task", {"task_id": 1, "result": "5 regions"}),
            ScriptedLLM.tool_call("complete_task", {"task_id": 2, "result": "North America 38.1%"}),
            TABLE_ANSWER,
        ]
    )


async def box(page: Page, selector: str) -> dict[str, float]:
    found = await page.locator(selector).first.bounding_box()
    assert found is not None, selector
    return found


async def lines_of(page: Page, text: str) -> int:
    """How many lines the table cell holding exactly ``text`` is laid out on."""
    return int(
        await page.evaluate(
            """text => {
              const cells = document.querySelectorAll('.msg.assistant th, .msg.assistant td');
              const cell = [...cells].find(td => td.textContent === text);
              const range = document.createRange();
              range.selectNodeContents(cell);
              return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size;
            }""",
            text,
        )
    )


async def test_on_a_phone_the_page_keeps_its_header_and_composer_and_tables_keep_numbers_whole() -> None:
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    agent = reasoning_agent(table_script())
    agent.name = "quarterly_revenue_assistant"  # a long name: the header must still fit a phone
    platform = WebSocketPlatform("127.0.0.1", 0)
    agent.add_platform(platform)
    async with agent, async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            phone = await browser.new_page(viewport={"width": 390, "height": 844})
            await phone.goto(f"http://127.0.0.1:{platform.port}/")
            await expect(phone.locator("#status")).to_have_attribute("data-state", "connected")
            # No tasks yet: on a phone the empty panel takes no room.
            await expect(phone.locator("#task-panel")).to_be_hidden()
            await phone.fill("#input", "What was the total revenue by region?")
            await phone.press("#input", "Enter")
            await expect(phone.locator(".msg.assistant td").first).to_have_text("North America")
            await expect(phone.locator("#tasks li.status-completed")).to_have_count(2)
            await phone.screenshot(path=str(ARTIFACTS / "layout_phone.png"))
            size = await phone.evaluate(
                "({page: document.scrollingElement.scrollHeight, wide: document.scrollingElement.scrollWidth,"
                " view: innerHeight, width: innerWidth})"
            )
            # The conversation scrolls inside its pane; the page itself stays put, header and composer in view.
            assert size["page"] <= size["view"] and size["wide"] <= size["width"], size
            assert await phone.evaluate("document.getElementById('messages').scrollHeight > "
                                        "document.getElementById('messages').clientHeight")  # fmt: skip
            header, composer = await box(phone, "header"), await box(phone, "#composer")
            assert header["y"] == 0 and composer["y"] + composer["height"] <= size["view"]
            # The tasks sit between the header and the conversation, above the composer.
            panel, messages = await box(phone, "#task-panel"), await box(phone, "#messages")
            assert header["y"] + header["height"] <= panel["y"] and panel["y"] + panel["height"] <= messages["y"]
            # A table keeps its numbers whole (it scrolls sideways in its bubble if it must).
            for cell in ("$1,750,900", "+13.5%", "2024-Q1", "Revenue"):
                assert await lines_of(phone, cell) == 1, cell
            table, bubble = await box(phone, ".msg.assistant table"), await box(phone, ".msg.assistant")
            assert table["x"] + table["width"] <= bubble["x"] + bubble["width"] + 0.5
            await phone.locator(".msg.assistant table").scroll_into_view_if_needed()
            await phone.screenshot(path=str(ARTIFACTS / "layout_phone_table.png"))
            await expect(phone.locator("#new-chat")).to_have_text("New chat")
            assert (await box(phone, "#new-chat"))["height"] < 40  # one line, not "New / chat"

            # A desktop keeps the task panel on the right of the conversation.
            desk = await browser.new_page(viewport={"width": 1280, "height": 800})
            token = await phone.evaluate("sessionStorage.getItem('baf.resume_token')")
            await desk.add_init_script(f"sessionStorage.setItem('baf.resume_token', {token!r});")
            await desk.goto(f"http://127.0.0.1:{platform.port}/")
            await expect(desk.locator("#tasks li.status-completed")).to_have_count(2)
            panel, messages = await box(desk, "#task-panel"), await box(desk, "#messages")
            assert panel["x"] >= messages["x"] + messages["width"]
            # The trace's answer line is the answer's first paragraph, not the table folded into | marks.
            await desk.locator("details.trace > summary").click()
            answer_line = desk.locator(".step.llm_text").last
            await expect(answer_line).to_have_text(
                "✎ answer: North America brought in the most revenue: $1,750,900 of $4,594,700 (38.1%). …"
            )
            await expect(answer_line.locator("strong")).to_have_text("North America")
            await desk.screenshot(path=str(ARTIFACTS / "layout_desktop.png"))
        finally:
            await browser.close()


async def test_a_message_the_agent_did_not_take_is_marked_not_sent_and_its_text_is_kept() -> None:
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    release = asyncio.Event()

    async def slow(session: Session) -> None:
        await release.wait()
        session.reply("done")

    agent = body_agent(slow)
    platform = WebSocketPlatform("127.0.0.1", 0, max_message_size=2000, max_pending_messages=1)
    agent.add_platform(platform)
    async with agent, async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 390, "height": 844})
            problems: list[Any] = []
            page.on("pageerror", lambda error: problems.append(str(error)))
            await page.goto(f"http://127.0.0.1:{platform.port}/")
            await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
            # Too long to send: not sent, said so, and the text stays in the box to be shortened.
            long_text = "word " * 500
            await page.fill("#input", long_text)
            await page.press("#input", "Enter")
            await expect(page.locator("#error-banner")).to_contain_text("too long")
            assert await page.input_value("#input") == long_text
            await expect(page.locator(".msg.user")).to_have_count(0)
            # One message may wait at a time here: the second is refused (busy), and shown as not sent.
            await page.fill("#input", "first")
            await page.press("#input", "Enter")
            await expect(page.locator(".msg.user[data-seq]")).to_have_count(1)
            await page.fill("#input", "second")
            await page.press("#input", "Enter")
            refused = page.locator('.msg.user[data-state="not-sent"]')
            await expect(refused).to_have_text("second")
            await expect(page.locator(".not-sent-note")).to_contain_text("Not sent")
            await expect(page.locator(".not-sent-note")).to_contain_text("still being handled")
            assert await page.input_value("#input") == "second"  # back in the box, to send again
            await page.screenshot(path=str(ARTIFACTS / "layout_not_sent.png"))
            release.set()
            await expect(page.locator(".msg.assistant")).to_have_text("done")
            # Offline: nothing is shown as sent, and the text stays.
            await platform.stop()
            await expect(page.locator("#status")).not_to_have_attribute("data-state", "connected")
            await page.fill("#input", "are you there?")
            await page.press("#input", "Enter")
            await expect(page.locator("#error-banner")).to_contain_text("not sent")
            assert await page.input_value("#input") == "are you there?"
            await expect(page.locator(".msg.user")).to_have_count(2)
            await page.screenshot(path=str(ARTIFACTS / "layout_offline.png"))
            assert problems == []
        finally:
            await browser.close()


async def test_a_message_refused_before_it_was_read_is_marked_not_sent_and_its_text_is_kept() -> None:
    # A rate_limited refusal is made before the frame is parsed, so it carries no id: the page must still
    # take it for its newest message, not leave that looking sent with the composer cleared.
    require_chromium()

    async def echo(session: Session) -> None:
        session.reply("got it")

    agent = body_agent(echo)
    # One frame per 10 s with a burst of one: the hello uses it, so a message right after it is refused.
    platform = WebSocketPlatform("127.0.0.1", 0, limits=ClientLimits(messages_per_second=0.1))
    agent.add_platform(platform)
    async with agent, async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            await page.goto(f"http://127.0.0.1:{platform.port}/")
            await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
            await page.fill("#input", "too soon")
            await page.press("#input", "Enter")
            refused = page.locator('.msg.user[data-state="not-sent"]')
            await expect(refused).to_have_text("too soon")
            await expect(page.locator(".not-sent-note")).to_contain_text("too many frames")
            assert await page.input_value("#input") == "too soon"
            await expect(page.locator(".msg.assistant")).to_have_count(0)
        finally:
            await browser.close()
