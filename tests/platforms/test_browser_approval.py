"""Human approval in the browser UI, driven by Playwright in headless Chromium: a tool call waiting for
approval shows with its arguments and Approve / Deny buttons; clicking them decides it, the loop goes on,
the card says who decided (live, in every tab of the session), and a reload shows the decided cards from
the history, reading the same. Never skips (see test_browser_ui.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from playwright.async_api import async_playwright, expect

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.log.record import RecordKind
from baf.platforms.websocket import WebSocketPlatform
from baf.testing.llms import FunctionLLM, ScriptedLLM

from .test_browser_ui import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_chromium


def _model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> Any:
    last = messages[-1]
    if last["role"] == "tool":
        return f"Outcome: {last['content']}"
    words = {"report": "report.txt", "draft": "draft.txt"}
    path = next((file for word, file in words.items() if word in last["content"]), "<b>notes</b>.txt")
    return ScriptedLLM.tool_call("delete_file", {"path": path}, id=f"call-{path[:3]}")


async def test_approve_and_deny_in_the_browser() -> None:
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    ran: list[str] = []
    agent = Agent("assistant", log="memory://")

    @agent.tool(requires_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: The file.
        """
        ran.append(path)
        return f"deleted {path}"

    state = new_reasoning_state(agent, FunctionLLM(_model), enable_task_planning=False)
    state.when_event().go_to(state)
    platform = WebSocketPlatform("127.0.0.1", 0)
    agent.add_platform(platform)
    async with agent, async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 800})
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            await page.goto(f"http://127.0.0.1:{platform.port}/")
            await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
            # The same conversation in a second tab (the token is per tab: hand it over, as a user who
            # duplicates the tab does).
            token = await page.evaluate("sessionStorage.getItem('baf.resume_token')")
            other = await browser.new_page(viewport={"width": 900, "height": 700})
            other.on("pageerror", lambda error: problems.append(str(error)))
            await other.add_init_script(f"sessionStorage.setItem('baf.resume_token', {json.dumps(token)})")
            await other.goto(f"http://127.0.0.1:{platform.port}/")
            await expect(other.locator("#status")).to_have_attribute("data-state", "connected")

            # 1. Approve: the card shows the call and its arguments; nothing runs before the click.
            await page.fill("#input", "delete the report")
            await page.press("#input", "Enter")
            card = page.locator('.approval[data-call-id="call-rep"]')
            await expect(card).to_have_attribute("data-state", "waiting")
            await expect(card.locator(".approval-title")).to_have_text("Approval needed: delete_file")
            arguments = json.loads(await card.locator("pre").inner_text())
            assert arguments == {"path": "report.txt"} and ran == []
            await expect(page.locator('details.trace[data-state="waiting"]')).to_have_count(1)
            await page.screenshot(path=str(ARTIFACTS / "approval_waiting.png"))
            await expect(other.locator('.approval[data-call-id="call-rep"]')).to_have_attribute("data-state", "waiting")
            await card.locator("button.approve").click()
            await expect(card).to_have_attribute("data-state", "approved")
            # Who decided shows live, without a reload: in this tab and in the other one.
            approved_live = card.locator(".approval-outcome")
            await expect(approved_live).to_have_text(re.compile(r"^Approved by web client 127\.0\.0\.1$"))
            assert await approved_live.get_attribute("title")  # when, on hover
            other_card = other.locator('.approval[data-call-id="call-rep"]')
            await expect(other_card).to_have_attribute("data-state", "approved")
            await expect(other_card.locator(".approval-outcome")).to_have_text(await approved_live.inner_text())
            await expect(other_card.locator("button:enabled")).to_have_count(0)
            # Decided: the buttons and the reason box are gone from both cards; the outcome line says it all.
            for decided in (card, other_card):
                await expect(decided.locator(".approval-buttons")).to_be_hidden()
            await expect(page.locator(".msg.assistant").last).to_have_text("Outcome: deleted report.txt")
            assert ran == ["report.txt"]

            # 2. Deny with a reason: the model is told, the tool never runs; markup in arguments stays text.
            await page.fill("#input", "delete my notes")
            await page.press("#input", "Enter")
            card = page.locator('.approval[data-call-id="call-<b>"]')
            await expect(card).to_have_attribute("data-state", "waiting")
            await expect(card.locator("pre")).to_contain_text("<b>notes</b>.txt")
            await card.locator("input.approval-reason").fill("keep my notes")
            await card.locator("button.deny").click()
            await expect(card).to_have_attribute("data-state", "denied")
            denied_live = re.compile(r"^Denied by web client 127\.0\.0\.1: keep my notes$")
            await expect(card.locator(".approval-outcome")).to_have_text(denied_live)
            other_card = other.locator('.approval[data-call-id="call-<b>"]')
            await expect(other_card.locator(".approval-outcome")).to_have_text(denied_live)
            await other.screenshot(path=str(ARTIFACTS / "approval_decided_other_tab.png"), full_page=True)
            answer = page.locator(".msg.assistant").last
            await expect(answer).to_contain_text("was denied by web client")
            await expect(answer).to_contain_text("keep my notes")
            assert ran == ["report.txt"]
            assert await page.locator("#messages b").count() == 0
            await page.screenshot(path=str(ARTIFACTS / "approval_decided.png"), full_page=True)

            # 3. A reload redraws both cards from the history, decided, with who decided.
            await page.reload()
            await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
            await expect(page.locator(".approval")).to_have_count(2)
            await expect(page.locator('.approval[data-state="approved"]')).to_have_count(1)
            denied = page.locator('.approval[data-state="denied"]')
            await expect(denied.locator(".approval-outcome")).to_have_text(denied_live)
            approved = page.locator('.approval[data-state="approved"] .approval-outcome')
            await expect(approved).to_have_text("Approved by web client 127.0.0.1")
            await expect(page.locator(".approval button:enabled")).to_have_count(0)
            await page.screenshot(path=str(ARTIFACTS / "approval_history.png"), full_page=True)

            # 4. A new message in one tab expires a waiting call: the other tab's card says so, live.
            await page.fill("#input", "delete the draft")
            await page.press("#input", "Enter")
            waiting = '.approval[data-call-id="call-dra"][data-state="waiting"]'
            await expect(page.locator(waiting)).to_have_count(1)
            await expect(other.locator(waiting)).to_have_count(1)
            await page.fill("#input", "no, stop")
            await page.press("#input", "Enter")
            expired = other.locator('.approval[data-call-id="call-dra"][data-state="expired"] .approval-outcome')
            await expect(expired).to_have_text("Expired: a new message was sent first")
            await expect(other.locator(".approval button:enabled")).to_have_count(0)
            assert ran == ["report.txt"]
            assert problems == []
            (session_id,) = await agent.log.sessions()
            decided = [r.data for r in await agent.log.read(session_id) if r.kind == RecordKind.APPROVAL_DECIDED]
            assert [(d["approved"], d["reason"]) for d in decided] == [(True, ""), (False, "keep my notes")]
            assert all(d["by"].startswith("web client ") for d in decided)
        finally:
            await browser.close()
