"""The browser UI while its server is down: a real server process stopped and started again on the same
port, the page in headless Chromium. The page says it is reconnecting (and which try), Send is disabled,
what the user types stays in the box and is sent once, after the page is back; nothing is queued."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from playwright.async_api import async_playwright, expect

from .test_browser_ui import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_chromium

AGENT = """
import os
from baf import Agent

agent = Agent("echo", log="sqlite:///echo.db")
state = agent.new_state("main", initial=True)

def echo(session):
    if session.event is not None and session.event.text is not None:
        session.reply("echo: " + session.event.text)

state.set_body(echo)
state.when_event().go_to(state)
agent.use_websocket_platform(host="127.0.0.1", port=int(os.environ["PORT"]))
if __name__ == "__main__":
    agent.run()
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(folder: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "agent.py"], cwd=folder, env={**os.environ, "PORT": str(port)},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


async def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.send_signal(signal.SIGINT)
    await asyncio.to_thread(server.wait, 30)


async def test_while_the_server_is_down_the_page_says_so_and_sends_nothing(tmp_path: Path) -> None:
    require_chromium()
    (tmp_path / "agent.py").write_text(AGENT)
    port = free_port()
    server = start_server(tmp_path, port)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1000, "height": 640})
            status = page.locator("#status")
            for _ in range(100):  # the server process is starting
                try:
                    await page.goto(f"http://127.0.0.1:{port}/")
                    break
                except Exception:
                    await asyncio.sleep(0.1)
            await expect(status).to_have_attribute("data-state", "connected", timeout=20_000)
            await page.fill("#input", "hello")
            await page.press("#input", "Enter")
            await expect(page.locator(".msg.assistant")).to_have_text(["echo: hello"])

            await stop_server(server)
            await expect(status).to_contain_text("reconnecting… (try ")
            await expect(page.locator("#error-banner")).to_contain_text("Reconnecting in")
            await expect(page.locator("#send")).to_be_disabled()
            await expect(page.locator("#new-chat")).to_be_disabled()
            await page.fill("#input", "typed while down")
            await page.press("#input", "Enter")
            await expect(page.locator("#error-banner")).to_contain_text("not sent")
            assert await page.input_value("#input") == "typed while down"  # kept, not sent, not queued
            await expect(page.locator(".msg.user")).to_have_text(["hello"])
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "websocket_ui_reconnecting.png"))

            server = start_server(tmp_path, port)  # the same log and port: the page resumes its session
            await expect(status).to_have_attribute("data-state", "connected", timeout=30_000)
            await expect(page.locator("#send")).to_be_enabled()
            await expect(page.locator("#error-banner")).to_be_hidden()
            assert await page.input_value("#input") == "typed while down"
            await page.click("#send")
            await expect(page.locator(".msg.assistant")).to_have_text(["echo: hello", "echo: typed while down"])
            await expect(page.locator(".msg.user")).to_have_text(["hello", "typed while down"])  # each once
            await page.screenshot(path=str(ARTIFACTS / "websocket_ui_reconnected.png"))
        finally:
            await browser.close()
            if server.poll() is None:
                await stop_server(server)
