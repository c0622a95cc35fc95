"""The browser UI with a streaming model: the answer grows in one bubble and ends as one rendered reply.

Headless Chromium (Debian's package) through Playwright, a real WebSocket, and a model streaming over
real HTTP from the local fake server. Never skips: without Chromium it fails and says how to install it.
"""

from __future__ import annotations

from llm.fake_openai_server import serve, streamed, tool_call_fragment
from playwright.async_api import async_playwright, expect

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm import LLMOpenAI
from baf.platforms.websocket import WebSocketPlatform

from .helpers import reasoning_agent
from .test_browser_ui import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_chromium

# Every text the assistant bubbles show, and how many there are, each time the chat changes.
WATCH_BUBBLES = """
window.bubbleStates = [];
document.addEventListener("DOMContentLoaded", () => {
  new MutationObserver(() => {
    const bubbles = [...document.querySelectorAll("#messages .msg.assistant")];
    const state = bubbles.map(b => (b.classList.contains("streaming") ? "~" : "=") + b.textContent).join(" | ");
    if (window.bubbleStates[window.bubbleStates.length - 1] !== state) window.bubbleStates.push(state);
  }).observe(document.getElementById("messages"), {childList: true, subtree: true, characterData: true});
});
"""


async def test_the_answer_grows_in_one_bubble_and_ends_as_one_rendered_reply() -> None:
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    lookup_call = [tool_call_fragment(0, "c1", "lookup", '{"topic": '), tool_call_fragment(0, arguments='"sales"}')]
    pieces = ["The ", "total ", "is ", "**42**, ", "from ", "`lookup`."]
    with serve() as server:
        server.script(
            streamed("Let me ", "look that up.", tool_calls=lookup_call, interval=0.15),
            streamed(*pieces, interval=0.3),
        )
        llm = LLMOpenAI("fake-model", base_url=server.base_url, stream=True, timeout=10.0)
        agent = reasoning_agent(llm)
        platform = WebSocketPlatform("127.0.0.1", 0)
        agent.add_platform(platform)
        async with agent, async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1100, "height": 700})
                problems: list[str] = []
                page.on("pageerror", lambda error: problems.append(str(error)))
                page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
                await page.add_init_script(WATCH_BUBBLES)
                await page.goto(f"http://127.0.0.1:{platform.port}/")
                await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
                await page.fill("#input", "What is the total?")
                await page.press("#input", "Enter")

                growing = page.locator(".msg.assistant.streaming")
                await expect(growing).to_contain_text("The total")  # the second turn's answer, half written
                assert "42" not in (await growing.text_content() or "")
                await page.screenshot(path=str(ARTIFACTS / "websocket_ui_streaming.png"))

                answer = page.locator(".msg.assistant")
                await expect(answer.locator("strong")).to_have_text("42")
                await expect(answer).to_have_count(1)
                await expect(growing).to_have_count(0)
                await expect(answer.locator("code")).to_have_text("lookup")
                await page.screenshot(path=str(ARTIFACTS / "websocket_ui_streamed_answer.png"))
                states: list[str] = await page.evaluate("window.bubbleStates")
                assert problems == []
            finally:
                await browser.close()
        await llm.close()
    # One bubble all along: it showed the first turn's words, was started afresh for the answer, grew
    # piece by piece, and became the rendered reply (Markdown: the ** and ` are gone).
    assert all(" | " not in state for state in states), states
    assert "~Let me look that up." in states
    grown = [state for state in states if state.startswith("~The")]
    assert grown[0] == "~The " and grown[-1] == "~" + "".join(pieces), grown
    assert len(grown) == len(pieces)
    assert states[-1].rstrip() == "=The total is 42, from lookup.", states


async def test_the_answer_after_an_approval_shows_below_the_card_as_after_a_reload() -> None:
    require_chromium()
    pay = [tool_call_fragment(0, "pay-1", "send_payment", '{"to": "Alice"}')]
    with serve() as server:
        server.script(
            streamed("Let me ", "pay.", tool_calls=pay, interval=0.05),
            streamed("Alice ", "was ", "paid.", interval=0.05),
        )
        llm = LLMOpenAI("fake-model", base_url=server.base_url, stream=True, timeout=10.0)
        agent = Agent("assistant", log="memory://")

        @agent.tool(requires_approval=True)
        def send_payment(to: str) -> str:
            """Send a payment.

            Args:
                to: Who is paid.
            """
            return f"paid {to}"

        state = new_reasoning_state(agent, llm, enable_task_planning=False)
        state.when_event().go_to(state)
        platform = WebSocketPlatform("127.0.0.1", 0)
        agent.add_platform(platform)
        order = """[...document.querySelectorAll("#messages .approval, #messages .msg.assistant")]
                   .map(e => e.classList.contains("approval") ? "card" : e.textContent.trim())"""
        async with agent, async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1100, "height": 700})
                await page.goto(f"http://127.0.0.1:{platform.port}/")
                await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
                await page.fill("#input", "pay Alice")
                await page.press("#input", "Enter")
                card = page.locator('.approval[data-call-id="pay-1"]')
                await expect(card).to_have_count(1)
                # The words streamed with the call are not left growing (with their cursor) above the card.
                await expect(page.locator(".msg.assistant.streaming")).to_have_count(0)
                await card.locator("button.approve").click()
                await expect(page.locator(".msg.assistant").last).to_have_text("Alice was paid.")
                live = await page.evaluate(order)
                await page.reload()
                await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
                await expect(page.locator(".msg.assistant")).to_have_count(1)
                assert live == await page.evaluate(order) == ["card", "Alice was paid."]
            finally:
                await browser.close()
        await llm.close()
