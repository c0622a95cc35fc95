"""The browser UI, driven by Playwright in headless Chromium (Debian's package, never a downloaded one).

This test never skips: if Chromium is missing it fails and says how to install it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, async_playwright, expect

from baf import Agent
from baf.core.session import Session
from baf.platforms.websocket import WebSocketPlatform

from .helpers import FINAL_ANSWER, body_agent, planning_script, reasoning_agent

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
HOSTILE = 'What is the total? <img src=x onerror="window.pwned=1"> [x](javascript:window.pwned=2)'
# The model's answer goes through the Markdown renderer: markup in it must stay text, and only the web link
# may become a link.
HOSTILE_ANSWER = (
    FINAL_ANSWER + '\n\n[x](javascript:window.pwned=2) <img src=x onerror="window.pwned=1"> [ok](https://a.example)'
)

# Every distinct task-panel state, in order: the statuses change faster than polling would see reliably.
WATCH_TASKS = """
window.taskStates = [];
document.addEventListener("DOMContentLoaded", () => {
  new MutationObserver(() => {
    const state = [...document.querySelectorAll("#tasks li")].map(li => li.dataset.status).join(",");
    if (state && window.taskStates[window.taskStates.length - 1] !== state) window.taskStates.push(state);
  }).observe(document.getElementById("tasks"), {childList: true, subtree: true, attributes: true});
});
"""


def require_chromium() -> None:
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests need Debian's chromium "
            "(apt-get install -y chromium); do not use 'playwright install'"
        )


@asynccontextmanager
async def browser_on(agent: Agent, **options: Any) -> AsyncIterator[tuple[Page, WebSocketPlatform, list[str]]]:
    """A page of the UI served for ``agent``; yields it, the platform and the page's errors."""
    require_chromium()
    platform = WebSocketPlatform("127.0.0.1", 0, **options)
    agent.add_platform(platform)
    async with agent, async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            await page.goto(f"http://127.0.0.1:{platform.port}/")
            await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
            yield page, platform, problems
        finally:
            await browser.close()


async def test_chat_trace_tasks_answer_and_history_after_reload() -> None:
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    agent = reasoning_agent(planning_script(delay=0.25, final=HOSTILE_ANSWER))
    platform = WebSocketPlatform("127.0.0.1", 0)
    agent.add_platform(platform)
    async with agent, async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 800})
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            await page.add_init_script(WATCH_TASKS)
            await page.goto(f"http://127.0.0.1:{platform.port}/")
            await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
            await expect(page.locator("#agent-name")).to_have_text("assistant")

            await page.fill("#input", HOSTILE)
            await page.press("#input", "Enter")
            await expect(page.locator(".msg.user")).to_have_text(HOSTILE)

            # The trace group opens while the model is still working, and tasks appear.
            running = page.locator('details.trace[data-state="running"]')
            await expect(running).to_have_count(1)
            assert await running.get_attribute("open") is not None
            await expect(page.locator("#tasks li")).to_have_count(2)
            await expect(page.locator("#tasks li").first).to_have_attribute("data-status", "in_progress")
            await page.wait_for_function("() => window.taskStates.some(s => s === 'completed,in_progress')")
            await page.screenshot(path=str(ARTIFACTS / "websocket_ui_live.png"))

            # Tasks tick off, the answer renders as Markdown, the group closes.
            await expect(page.locator("#tasks li.status-completed")).to_have_count(2)
            states = await page.evaluate("window.taskStates")
            assert states == ["in_progress,pending", "completed,in_progress", "completed,completed"], states
            answer = page.locator(".msg.assistant")
            await expect(answer.locator("strong")).to_have_text("42")
            await expect(answer.locator("code")).to_have_text("lookup")
            finished = page.locator('details.trace[data-state="finished"]')
            await expect(finished).to_have_count(1)
            assert await finished.get_attribute("open") is None
            await expect(finished.locator(":scope > summary")).to_contain_text("answered · 5 turns")
            await check_trace(page)
            await check_nothing_was_injected(page)

            token = await page.evaluate("sessionStorage.getItem('baf.resume_token')")
            await page.reload()
            await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
            await expect(page.locator(".msg.user")).to_have_text(HOSTILE)
            await expect(page.locator(".msg.assistant strong")).to_have_text("42")
            await expect(page.locator("#tasks li.status-completed")).to_have_count(2)
            await expect(page.locator('details.trace[data-state="finished"]')).to_have_count(1)
            # The same session, with the fresh token its welcome carried (tokens are renewed on each welcome).
            renewed = await page.evaluate("sessionStorage.getItem('baf.resume_token')")
            assert renewed.split(".")[0] == token.split(".")[0]
            await check_trace(page)
            await check_nothing_was_injected(page)
            await page.locator("details.trace > summary").click()
            await page.locator("details.tool-call").first.locator("summary").click()
            await page.locator("details.tool-result").first.locator("summary").click()
            await page.screenshot(path=str(ARTIFACTS / "websocket_ui_history.png"), full_page=True)
            assert problems == []
        finally:
            await browser.close()


async def check_trace(page: Page) -> None:
    """Steps are grouped by turn, with the tool call and its result expandable."""
    trace = page.locator("details.trace")
    await expect(trace.locator(".turn")).to_have_count(5)
    await expect(trace.locator(".turn-title").first).to_have_text("Turn 1")
    await expect(trace.locator("details.tool-call summary")).to_have_count(4)
    result = trace.locator("details.tool-result")
    await expect(result).to_have_count(1)
    await expect(result.locator("summary")).to_contain_text("lookup returned")
    await expect(result.locator("pre")).to_have_text("sales: 42 <b>units</b>", use_inner_text=False)


async def check_nothing_was_injected(page: Page) -> None:
    """Markup from users, models and tools is shown as text: no element and no script came from it."""
    assert await page.evaluate("typeof window.pwned") == "undefined"
    assert await page.locator("#messages img, #messages b").count() == 0
    links = page.locator("#messages a")
    await expect(links).to_have_count(1)
    await expect(links).to_have_text("ok")
    assert await links.get_attribute("href") == "https://a.example"
    answer = page.locator(".msg.assistant").last
    await expect(answer).to_contain_text('[x](javascript:window.pwned=2) <img src=x onerror="window.pwned=1">')


# A reply marked cannot render (its blockquotes nest too deep: "Maximum call stack size exceeded"), and one
# longer than the UI formats (marked's emphasis handling is quadratic on "*a_" runs: it would freeze the tab).
DEEP_QUOTES = "> " * 5000 + "deep"
LONG_EMPHASIS = "*a_" * 4000


def hostile_replies(session: Session) -> None:
    assert session.event is not None
    text = session.event.text or ""
    session.reply({"quote": DEEP_QUOTES, "long": LONG_EMPHASIS}.get(text, f"echo: {text}"))


async def plain_reply(page: Page, text: str) -> None:
    """The reply ``text`` is in one bubble as plain text, with a note, and nothing was formatted in it."""
    bubble = page.locator(".msg.assistant", has=page.locator(".plain-text")).filter(has_text=text[:40])
    await expect(bubble).to_have_count(1)
    assert await bubble.locator(".plain-text").text_content() == text
    await expect(bubble.locator(".plain-note")).to_contain_text("Shown as plain text")
    assert await bubble.locator("em, strong, blockquote").count() == 0


async def test_a_reply_that_cannot_render_is_plain_text_and_the_history_after_it_is_shown() -> None:
    async with browser_on(body_agent(hostile_replies)) as (page, _, problems):
        for text in ("before", "quote", "after"):
            await page.fill("#input", text)
            await page.press("#input", "Enter")
        await expect(page.locator(".msg.assistant")).to_have_count(3)
        await plain_reply(page, DEEP_QUOTES)
        await page.reload()
        await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
        await expect(page.locator(".msg.user")).to_have_text(["before", "quote", "after"])
        replies = page.locator(".msg.assistant")
        await expect(replies).to_have_count(3)
        await expect(replies.nth(0)).to_have_text("echo: before")
        await expect(replies.nth(2)).to_have_text("echo: after")
        await plain_reply(page, DEEP_QUOTES)
        await expect(page.locator(".msg.error")).to_have_count(0)
        # A later message is still answered in order (the view's seq was not left past unshown records).
        await page.fill("#input", "later")
        await page.press("#input", "Enter")
        await expect(replies).to_have_count(4)
        await expect(replies.nth(3)).to_have_text("echo: later")
        assert problems == []


async def test_a_reply_too_long_to_format_is_plain_text_live_and_after_a_reload() -> None:
    async with browser_on(body_agent(hostile_replies)) as (page, _, problems):
        await page.fill("#input", "long")
        await page.press("#input", "Enter")
        await expect(page.locator(".msg.assistant")).to_have_count(1)
        await plain_reply(page, LONG_EMPHASIS)
        await expect(page.locator(".plain-note")).to_have_text(
            "Shown as plain text: too long to format (12000 characters)."
        )
        await page.fill("#input", "quote")  # for the screenshot: both kinds of plain reply
        await page.press("#input", "Enter")
        await expect(page.locator(".msg.assistant")).to_have_count(2)
        await page.reload()
        await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
        await expect(page.locator(".msg.assistant")).to_have_count(2)
        await plain_reply(page, LONG_EMPHASIS)
        await plain_reply(page, DEEP_QUOTES)
        assert await page.locator("#messages em").count() == 0
        # Both cases on one screen: the end of the long reply with its note, then the deep quotes.
        await page.locator(".plain-note").first.evaluate(
            "(note) => { const box = document.getElementById('messages'); box.scrollTop = note.offsetTop - 420; }"
        )
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "websocket_ui_plain_text.png"))
        assert problems == []
