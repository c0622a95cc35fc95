"""A local stand-in of the Telegram Bot API on loopback: records every call, plays updates, serves files.

The bot under test is pointed at it with ``api_base``; no test reaches Telegram. Failures are scripted
per method with :meth:`BotAPIStandIn.fail` (a 429 storm, a 400, ...).
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from aiohttp import web

TOKEN = "123456:TEST-token_for-the-stand-in"


@dataclass
class Call:
    """One Bot API call the bot made."""

    method: str
    params: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    files: dict[str, bytes] = field(default_factory=dict)
    #: False when the stand-in answered it with a scripted failure.
    ok: bool = True
    #: What the stand-in answered (a sent message, with its ``message_id``).
    result: Any = None

    @property
    def chat_id(self) -> int | None:
        value = self.params.get("chat_id")
        return int(value) if value is not None else None


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def visible_text(markup: str) -> str:
    """What a user reads of a message sent in HTML parse mode."""
    parser = _Text()
    parser.feed(markup)
    parser.close()
    return "".join(parser.parts)


class BotAPIStandIn:
    """An aiohttp server speaking enough of the Bot API for the Telegram platform."""

    def __init__(self, username: str = "baf_test_bot") -> None:
        self.username = username
        self.calls: list[Call] = []
        self.updates: list[dict[str, Any]] = []
        self.files: dict[str, bytes] = {}
        self.file_sizes: dict[str, int | None] = {}
        self.webhook: dict[str, Any] | None = None
        self._failures: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self._update_ids = itertools.count(1)
        self._confirmed = 0
        self._message_ids = itertools.count(1000)
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> BotAPIStandIn:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- scripting --------------------------------------------------------------------------------

    def fail(self, method: str, times: int, status: int = 429, retry_after: int = 1, description: str = "") -> None:
        """Answer the next ``times`` calls of ``method`` with an error (429 with ``retry_after`` by default)."""
        body: dict[str, Any] = {"ok": False, "error_code": status, "description": description or f"error {status}"}
        if status == 429:
            body["parameters"] = {"retry_after": retry_after}
            body["description"] = description or f"Too Many Requests: retry after {retry_after}"
        self._failures.setdefault(method, []).extend([(status, body)] * times)

    def push(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue a raw update (``update_id`` added when missing)."""
        update.setdefault("update_id", next(self._update_ids))
        self.updates.append(update)
        self._changed.set()
        return update

    def message(self, chat_id: int, **content: Any) -> dict[str, Any]:
        """A message object from a private chat ``chat_id`` (``text=...``, ``photo=[...]``, ...)."""
        return {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private", "first_name": f"user{chat_id}"},
            "from": {"id": chat_id, "is_bot": False, "first_name": f"user{chat_id}"},
            **content,
        }

    def push_message(self, chat_id: int, **content: Any) -> dict[str, Any]:
        """Queue a ``message`` update."""
        return self.push({"message": self.message(chat_id, **content)})

    def press(self, call: Call, button: int, from_id: int | None = None, chat_id: int | None = None) -> dict[str, Any]:
        """Queue a ``callback_query`` update: user ``from_id`` (default: the chat's user) pressed inline
        button ``button`` (0, 1, ... across the rows) of the message ``call`` sent, in its chat (or, to
        play a forged press, in ``chat_id``)."""
        rows = json.loads(call.params["reply_markup"])["inline_keyboard"]
        data = [button for row in rows for button in row][button]["callback_data"]
        chat = int(call.params["chat_id"]) if chat_id is None else chat_id
        user = chat if from_id is None else from_id
        return self.push({"callback_query": {
            "id": f"cq{next(self._update_ids)}", "chat_instance": f"ci{chat}", "data": data,
            "from": {"id": user, "is_bot": False, "first_name": f"user{user}", "username": f"user{user}"},
            "message": {"message_id": call.result["message_id"], "date": int(time.time()),
                        "chat": {"id": chat, "type": "private", "first_name": f"user{chat}"},
                        "text": visible_text(call.params["text"])},
        }})  # fmt: skip

    def answers(self) -> list[dict[str, Any]]:
        """The ``answerCallbackQuery`` calls' parameters, in order."""
        return [c.params for c in self.calls if c.method == "answerCallbackQuery"]

    def add_file(self, file_id: str, content: bytes, reported_size: int | None = -1) -> None:
        """Serve ``content`` for ``file_id``; ``reported_size`` is what getFile says (-1: the true size)."""
        self.files[file_id] = content
        self.file_sizes[file_id] = len(content) if reported_size == -1 else reported_size

    # -- reading what the bot did -----------------------------------------------------------------

    def methods(self, chat_id: int | None = None) -> list[str]:
        return [c.method for c in self.calls if chat_id is None or c.chat_id == chat_id]

    def sent_texts(self, chat_id: int) -> list[str]:
        """Visible texts of every sendMessage to ``chat_id`` that was answered ok, in order."""
        return [visible_text(c.params["text"]) if c.params.get("parse_mode") == "HTML" else c.params["text"]
                for c in self.calls if c.method == "sendMessage" and c.chat_id == chat_id and c.ok]  # fmt: skip

    async def wait_for(self, check: Callable[[], Any], within: float = 5.0) -> Any:
        """Wait until ``check()`` is truthy (re-checked after every call), and return it."""
        async with asyncio.timeout(within):
            while not (result := check()):
                self._changed.clear()
                await self._changed.wait()
            return result

    # -- the API ----------------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != TOKEN:
            return web.json_response({"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401)
        method = request.match_info["method"]
        params: dict[str, Any] = {}
        files: dict[str, bytes] = {}
        form = await request.post()
        for key, value in form.items():
            if isinstance(value, web.FileField):
                files[key] = value.file.read()
            else:
                params[key] = value
        # aiogram uploads as ``document=attach://<field>``: give the bytes under the parameter's name.
        for key, value in list(params.items()):
            if isinstance(value, str) and value.startswith("attach://"):
                files[key] = files.pop(value.removeprefix("attach://"))
                del params[key]
        call = Call(method, params, files=files)
        self.calls.append(call)
        self._changed.set()
        pending = self._failures.get(method)
        if pending:
            status, body = pending.pop(0)
            call.ok = False
            return web.json_response(body, status=status)
        if method == "getUpdates":
            return web.json_response({"ok": True, "result": await self._get_updates(params)})
        call.result = self._result(method, params)
        return web.json_response({"ok": True, "result": call.result})

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        # As Telegram does: an offset confirms every update before it, for good.
        self._confirmed = max(self._confirmed, int(params.get("offset") or 0))
        offset = self._confirmed
        deadline = time.monotonic() + min(float(params.get("timeout") or 0), 0.2)
        while True:
            ready = [u for u in self.updates if u["update_id"] >= offset]
            remaining = deadline - time.monotonic()
            if ready or remaining <= 0:
                return ready
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    def _result(self, method: str, params: dict[str, Any]) -> Any:
        if method == "getMe":
            return {"id": 123456, "is_bot": True, "first_name": "baf", "username": self.username}
        if method == "setWebhook":
            self.webhook = params
            return True
        if method in ("deleteWebhook", "sendChatAction", "answerCallbackQuery"):
            return True
        if method == "getFile":
            file_id = params["file_id"]
            return {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": self.file_sizes.get(file_id),
                    "file_path": f"documents/{file_id}"}  # fmt: skip
        if method in ("sendMessage", "sendDocument", "sendPhoto", "editMessageText"):
            message: dict[str, Any] = {
                "message_id": int(params.get("message_id") or next(self._message_ids)),
                "date": int(time.time()),
                "chat": {"id": int(params["chat_id"]), "type": "private", "first_name": "user"},
            }
            if "text" in params:
                message["text"] = html.unescape(visible_text(params["text"]))
            return message
        raise web.HTTPNotFound(text=json.dumps({"ok": False, "error_code": 404, "description": "Not Found"}))

    async def _file(self, request: web.Request) -> web.Response:
        file_id = request.match_info["path"].rsplit("/", 1)[-1]
        if request.match_info["token"] != TOKEN or file_id not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[file_id])
