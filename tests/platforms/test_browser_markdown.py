"""The browser UI in headless Chromium: Markdown through the vendored marked + DOMPurify (tables, code,
links, nothing unsafe), the empty-chat hint, and a reconnect that asks for what came after the last seq."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

from playwright.async_api import expect

from baf import Agent
from baf.core.session import Session

from .helpers import body_agent, planning_script, reasoning_agent
from .test_browser_ui import ARTIFACTS, browser_on

VENDOR = Path(__file__).resolve().parents[2] / "baf" / "platforms" / "web" / "vendor"

TABLE_ANSWER = """Sales by region:

| Region | 2024-Q1 | 2024-Q2 |
|---|---:|---:|
| North | 120 | 135 |
| South | 98 | 101 |

```python
total = sum(sales.values())
print(f"{total} <units>")
```

See [the report](https://reports.example/q2) or <https://docs.example>. Not [this](javascript:alert(1)),
nor [that](JAVASCRIPT:window.pwned=3), nor [data](data:text/html,<script>window.pwned=4</script>).
<script>window.pwned = 5</script><iframe src="https://evil.example"></iframe>
<a href="javascript:window.pwned=6">raw link</a> ![img](https://evil.example/x.png)"""


# Every element the renderer made for a Markdown text: [tag, [[attribute, value], ...]].
RENDERED = """(md) => {
  const box = document.createElement("div");
  box.appendChild(window.bafRenderMarkdown(md));
  return [...box.querySelectorAll("*")].map((e) => [e.tagName, [...e.attributes].map((a) => [a.name, a.value])]);
}"""


def replying(text: str) -> Agent:
    def body(session: Session) -> None:
        session.reply(text)

    return body_agent(body)


def test_the_vendored_libraries_are_the_pinned_files_with_their_licences() -> None:
    readme = (VENDOR / "README.md").read_text()
    for name in ("marked.umd.js", "purify.min.js"):
        digest = hashlib.sha256((VENDOR / name).read_bytes()).hexdigest()
        assert f"`{name}`" in readme and digest in readme, name
    assert "marked v18.2.1" in (VENDOR / "marked.umd.js").read_text()[:200]
    assert "DOMPurify 3.4.18" in (VENDOR / "purify.min.js").read_text()[:200]
    assert "MIT" in (VENDOR / "marked-LICENSE.txt").read_text()
    licence = (VENDOR / "dompurify-LICENSE.txt").read_text()
    assert "Apache License" in licence and "Mozilla Public License" in licence


async def test_tables_code_blocks_and_links_render_and_nothing_unsafe_does() -> None:
    async with browser_on(replying(TABLE_ANSWER)) as (page, _, problems):
        await page.fill("#input", "sales?")
        await page.press("#input", "Enter")
        answer = page.locator(".msg.assistant")
        await expect(answer.locator("table")).to_have_count(1)
        await expect(answer.locator("th")).to_have_text(["Region", "2024-Q1", "2024-Q2"])
        await expect(answer.locator("tbody tr")).to_have_count(2)
        await expect(answer.locator("tbody tr").first.locator("td")).to_have_text(["North", "120", "135"])
        # The columns marked |---:| are right-aligned (numbers line up), the first keeps the default.
        aligned = (
            await answer.locator("tbody tr")
            .first.locator("td")
            .evaluate_all("(cells) => cells.map((cell) => getComputedStyle(cell).textAlign)")
        )
        assert aligned == ["left", "right", "right"]
        code = answer.locator("pre code")
        await expect(code).to_have_text('total = sum(sales.values())\nprint(f"{total} <units>")\n')
        links = answer.locator("a")
        await expect(links).to_have_count(2)
        assert await links.nth(0).get_attribute("href") == "https://reports.example/q2"
        assert await links.nth(1).get_attribute("href") == "https://docs.example"
        for n in range(2):
            assert await links.nth(n).get_attribute("target") == "_blank"
            assert await links.nth(n).get_attribute("rel") == "noopener noreferrer"
        # Unsafe links and raw HTML stay visible as text; nothing ran, nothing loaded.
        await expect(answer).to_contain_text("[this](javascript:alert(1))")
        await expect(answer).to_contain_text("<script>window.pwned = 5</script>")
        await expect(answer).to_contain_text('<a href="javascript:window.pwned=6">raw link</a>')
        assert await page.locator("#messages script, #messages iframe, #messages img").count() == 0
        assert await page.evaluate("typeof window.pwned") == "undefined"
        assert problems == []


async def test_the_renderer_refuses_every_unsafe_url_scheme() -> None:
    async with browser_on(replying("hi")) as (page, _, problems):
        cases = [
            "[a](javascript:window.pwned=1)",
            "[a](  javascript:window.pwned=1)",
            "[a](java\tscript:window.pwned=1)",
            "[a](vbscript:msgbox(1))",
            "[a](data:text/html;base64,PHNjcmlwdD4=)",
            '<a href="javascript:window.pwned=1">a</a>',
            '<img src=x onerror="window.pwned=1">',
            "<svg onload=window.pwned=1>",
            '[a](https://ok.example "t" onclick=window.pwned=1)',
        ]
        for case in cases:
            rendered = await page.evaluate(RENDERED, case)
            hrefs = [href for tag, attrs in rendered for name, href in attrs if name == "href"]
            assert all(h.startswith(("https://", "http://", "mailto:")) for h in hrefs), (case, rendered)
            assert {tag for tag, _ in rendered} <= {"P", "A", "EM", "STRONG", "CODE"}, (case, rendered)
            assert not [name for _, attrs in rendered for name, _ in attrs if name.startswith("on")], (case, rendered)
        assert await page.evaluate("typeof window.pwned") == "undefined"
        assert problems == []


async def test_the_task_panel_shows_the_latest_runs_plan_not_an_earlier_one() -> None:
    script = planning_script()
    script.responses.append("Just 7.")  # the second question is answered without a plan
    async with browser_on(reasoning_agent(script)) as (page, _, problems):
        tasks = page.locator("#tasks li")
        await expect(page.locator("#task-panel")).to_be_hidden()  # before any plan, on a desktop too
        await page.fill("#input", "total?")
        await page.press("#input", "Enter")
        await expect(page.locator('details.trace[data-state="finished"]')).to_have_count(1)
        await expect(tasks).to_have_count(2)
        await expect(page.locator("#task-panel")).to_be_visible()
        await page.fill("#input", "and 3 + 4?")
        await page.press("#input", "Enter")
        await expect(page.locator('details.trace[data-state="finished"]')).to_have_count(2)
        await expect(page.locator(".msg.assistant").last).to_have_text("Just 7.")
        await expect(tasks).to_have_count(0)
        await expect(page.locator("#task-panel")).to_be_hidden()  # no plan: no empty panel beside the answer
        await page.reload()  # the history draws the same
        await expect(page.locator(".msg.assistant")).to_have_count(2)
        await expect(tasks).to_have_count(0)
        assert problems == []


async def test_the_trace_line_renders_inline_markdown_instead_of_raw_stars() -> None:
    agent = reasoning_agent(planning_script(final="The total is **42** (from `lookup`)."))
    async with browser_on(agent) as (page, _, problems):
        await page.fill("#input", "total?")
        await page.press("#input", "Enter")
        finished = page.locator('details.trace[data-state="finished"]')
        await expect(finished).to_have_count(1)
        answer_line = finished.locator(".step.llm_text").last
        await expect(answer_line.locator("strong")).to_have_text("42")
        await expect(answer_line.locator("code")).to_have_text("lookup")
        assert "**" not in await finished.inner_text()
        assert problems == []


async def test_the_empty_chat_shows_a_hint_and_the_examples_send_themselves() -> None:
    async with browser_on(replying("sure"), examples=["What can you do?", "Sales by region"]) as (page, _, problems):
        hint = page.locator("#empty-hint")
        await expect(hint).to_be_visible()
        await expect(hint).to_contain_text("Ask bodies anything to start")
        await expect(hint.locator("button")).to_have_text(["What can you do?", "Sales by region"])
        await hint.locator("button").nth(1).click()
        await expect(page.locator(".msg.user")).to_have_text("Sales by region")
        await expect(page.locator(".msg.assistant")).to_have_text("sure")
        await expect(hint).to_be_hidden()
        await page.locator("#new-chat").click()  # a new conversation is empty again
        await expect(hint).to_be_visible()
        assert problems == []


async def test_a_dropped_connection_resumes_after_the_last_seq_and_shows_each_reply_once() -> None:
    gate = asyncio.Event()

    async def body(session: Session) -> None:
        session.reply("one")
        await gate.wait()
        for text in ("two", "three"):
            session.reply(text)

    async with browser_on(body_agent(body)) as (page, platform, problems):
        hellos: list[dict[str, Any]] = []

        def watch(ws: Any) -> None:
            def sent(payload: str | bytes) -> None:
                frame = json.loads(payload)
                if frame.get("type") == "hello":
                    hellos.append(frame)

            ws.on("framesent", sent)

        page.on("websocket", watch)
        await page.reload()  # so the watcher sees this page's socket from its start
        await expect(page.locator("#status")).to_have_attribute("data-state", "connected")
        await page.fill("#input", "go")
        await page.press("#input", "Enter")
        await expect(page.locator(".msg.assistant")).to_have_text(["one"])
        for client in list(platform._clients):  # the network drops: no closing handshake
            client.ws.transport.abort()
        await expect(page.locator("#status")).to_have_attribute("data-state", "disconnected")
        gate.set()  # "two" and "three" are sent while the page is away
        await expect(page.locator("#status")).to_have_attribute("data-state", "connected", timeout=10_000)
        await expect(page.locator(".msg.assistant")).to_have_text(["one", "two", "three"])
        await expect(page.locator(".msg.user")).to_have_text(["go"])
        # Replies arrive in order: one shown twice would come before the next message's
        await page.fill("#input", "again")
        await page.press("#input", "Enter")
        replies = ["one", "two", "three"]
        await expect(page.locator(".msg.assistant")).to_have_text(replies + replies)
        assert hellos[-1].get("after_seq", 0) > 0, hellos  # asked only for what came after
        assert problems == [] or all("WebSocket" in p for p in problems), problems


async def test_a_screenshot_of_a_conversation_with_a_table_code_and_a_link() -> None:
    answer = TABLE_ANSWER.split("Not [this]")[0].rstrip() + " More in **bold** and _italics_."
    async with browser_on(replying(answer), examples=["Sales by region"]) as (page, _, problems):
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "websocket_ui_empty.png"))
        await page.fill("#input", "Sales by region, please")
        await page.press("#input", "Enter")
        await expect(page.locator(".msg.assistant table")).to_have_count(1)
        await page.screenshot(path=str(ARTIFACTS / "websocket_ui_markdown.png"))
        assert problems == []
