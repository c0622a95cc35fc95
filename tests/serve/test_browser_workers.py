"""One conversation in two browser tabs (headless Chromium), each connected to another worker process over
one PostgreSQL log: what either tab sends appears live in the other, in order with the answers, the
reasoning trace and the task list; once in the tab that sent it. Never skips (see test_browser_ui.py)."""

from __future__ import annotations

import pytest
from platforms.test_browser_two_tabs import conversation, open_tab, send
from platforms.test_browser_ui import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_chromium
from playwright.async_api import async_playwright, expect

from .helpers import free_port, owner_of, ready, stop_processes
from .test_delivery_processes import start, worker_command


@pytest.mark.slow
async def test_two_tabs_on_two_workers_show_each_others_messages_live(postgres_dsn: str) -> None:
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    port_a, port_b = free_port(), free_port()
    ui = {"BAF_SERVE_UI": "1", "BAF_SERVE_DELAY": "0.05"}
    a = start(worker_command(postgres_dsn), port_a, **ui)
    b = start(worker_command(postgres_dsn), port_b, **ui)
    try:
        id_a, id_b = await ready(a), await ready(b)
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                on_b = await open_tab(browser, f"http://127.0.0.1:{port_b}/")
                await send(on_b, "q1")
                await expect(on_b.locator(".msg.assistant")).to_have_count(1)
                token = await on_b.evaluate("sessionStorage.getItem('baf.resume_token')")
                session_id = token.split(".")[0]
                assert await owner_of(postgres_dsn, session_id) == id_b
                # The same conversation in a tab connected to worker a, which does not run it.
                on_a = await open_tab(browser, f"http://127.0.0.1:{port_a}/", token, width=390)
                await expect(on_a.locator(".msg.assistant")).to_have_count(1)
                await send(on_a, "q2")  # forwarded to b; b's tab gets it as b records it
                await expect(on_b.locator(".msg.user")).to_have_count(2)
                await expect(on_a.locator(".msg.assistant")).to_have_count(2)
                await send(on_b, "q3")  # a's tab gets it from the log
                await expect(on_a.locator(".msg.user")).to_have_count(3)
                expected = [f"{who}: {text}" for q in ("q1", "q2", "q3")
                            for who, text in (("user", q), ("agent", f"answer to {q}"))]  # fmt: skip
                for page in (on_a, on_b):
                    await expect(page.locator(".msg.assistant")).to_have_count(3)
                    await expect(page.locator('details.trace[data-state="finished"]')).to_have_count(3)
                    await expect(page.locator("#tasks li.status-completed")).to_have_count(1)  # the last turn's
                    assert await conversation(page) == expected
                    await expect(page.locator(".msg.user[data-seq]")).to_have_count(3)
                await on_a.screenshot(path=str(ARTIFACTS / "two_workers_tab_a.png"), full_page=True)
                await on_b.screenshot(path=str(ARTIFACTS / "two_workers_tab_b.png"), full_page=True)
                assert await owner_of(postgres_dsn, session_id) == id_b and id_a != id_b
                for page in (on_a, on_b):
                    assert page.problems == []  # type: ignore[attr-defined]
            finally:
                await browser.close()
    finally:
        await stop_processes([a, b])
