"""One conversation open in two browser tabs (headless Chromium, Playwright): what the user types in one
tab appears live in the other, in order with the answers, and once in the tab that sent it. Never skips
(see test_browser_ui.py)."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Browser, Page, async_playwright, expect

from baf.platforms.websocket import WebSocketPlatform
from baf.testing import FunctionLLM

from .helpers import reasoning_agent
from .test_browser_ui import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_chromium


def echo_model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> str:
    return f"You said **{messages[-1]['content']}**."


async def open_tab(browser: Browser, url: str, token: str | None = None, width: int = 1000) -> Page:
    """A new tab on ``url``; with ``token``, one showing that conversation (as a duplicated tab does: the
    UI keeps its resume token in ``sessionStorage``, which a duplicated tab copies)."""
    page = await browser.new_page(viewport={"width": width, "height": 700})
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.problems = problems  # type: ignore[attr-defined]
    if token is not None:
        await page.add_init_script(f"sessionStorage.setItem('baf.resume_token', {token!r});")
    await page.goto(url)
    await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
    return page


async def conversation(page: Page) -> list[str]:
    """The chat as the page shows it: each bubble's class and text, top to bottom."""
    return list(
        await page.locator("#messages > .msg").evaluate_all(
            "nodes => nodes.map(n => (n.classList.contains('user') ? 'user: ' : 'agent: ') + n.textContent.trim())"
        )
    )


async def send(page: Page, text: str) -> None:
    await page.fill("#input", text)
    await page.press("#input", "Enter")


async def test_what_one_tab_sends_appears_live_in_the_other_once_and_in_order() -> None:
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    agent = reasoning_agent(FunctionLLM(echo_model))
    platform = WebSocketPlatform("127.0.0.1", 0)
    agent.add_platform(platform)
    async with agent, async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            first = await open_tab(browser, platform.url)
            token = await first.evaluate("sessionStorage.getItem('baf.resume_token')")
            second = await open_tab(browser, platform.url, token, width=390)  # a phone, say
            await send(first, "hello from the laptop")
            await expect(first.locator(".msg.assistant")).to_have_count(1)
            await send(first, "and once more")
            expected = [
                "user: hello from the laptop",
                "agent: You said hello from the laptop.",
                "user: and once more",
                "agent: You said and once more.",
            ]
            for page in (first, second):
                await expect(page.locator("#messages > .msg")).to_have_count(4)
                assert await conversation(page) == expected
            await send(second, "typed on the phone")
            expected += ["user: typed on the phone", "agent: You said typed on the phone."]
            for page in (first, second):
                await expect(page.locator("#messages > .msg")).to_have_count(6)
                assert await conversation(page) == expected
                # Each message once: the sender's own bubble was matched to the server's by its id.
                await expect(page.locator(".msg.user[data-seq]")).to_have_count(3)
            await first.screenshot(path=str(ARTIFACTS / "two_tabs_first.png"), full_page=True)
            await second.screenshot(path=str(ARTIFACTS / "two_tabs_second.png"), full_page=True)
            await second.reload()  # a reload shows the same conversation
            await expect(second.locator("#messages > .msg")).to_have_count(6)
            assert await conversation(second) == expected
            for page in (first, second):
                assert page.problems == []  # type: ignore[attr-defined]
        finally:
            await browser.close()
