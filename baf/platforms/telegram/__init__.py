"""A Telegram bot for an agent, on aiogram 3 (the ``telegram`` extra: ``pip install -e ".[telegram]"`` in a clone).

::

    agent.add_platform(TelegramPlatform(token))                                  # long polling
    agent.add_platform(TelegramPlatform(token, webhook_url="https://bot.example.com/tg",
                                        webhook_port=8443))                      # webhook
    agent.run()

Each Telegram chat is one session, ``telegram-<chat id>``: the platform keeps no session state, it reads
the chat from the session id when it answers. What it translates:

- **In**: text messages and commands (``/start``; ``/help@ThisBot`` loses its ``@ThisBot``, a command for
  another bot in a group is left alone) arrive as ``ReceiveTextEvent``; photos and documents as
  ``ReceiveFileEvent`` (the caption is its text), up to ``max_file_size`` bytes, checked before the
  download and again while it streams. Other content (stickers, voice, ...) gets a short answer saying
  what the bot reads. An edited message is not applied (the log is append-only and the agent already
  answered the original): the user is told to send it again. A chat not in ``allowed_chats`` (when given)
  gets ``refusal`` (``None``: silence) and nothing is recorded. Updates of any other type are skipped.
- **Out**: replies in Telegram's HTML parse mode (see :mod:`baf.platforms.telegram.markup`: every
  character of model and user text is escaped), split at Telegram's 4,096-character limit; options as a
  one-time reply keyboard; files and images as documents and photos. A typing indicator shows while the
  agent handles a message. Reasoning steps and task lists share one status message per loop, edited in
  place at most every ``step_edit_interval`` seconds. Sends are queued per chat and never make the
  agent wait; a 429's ``retry_after`` is honoured (see :mod:`baf.platforms.telegram.outbox`).
- **Approvals**: a tool call waiting for a human's approval is a message with Approve and Deny buttons; a
  press (by one of ``approvers``, when given) becomes an ``ApprovalEvent`` of the chat's session, is
  answered at once, and the message is edited to show the decision the log recorded. A press on a request
  already decided or expired is answered so, and changes nothing (see
  :mod:`baf.platforms.telegram.approvals`).

Telegram delivers at least once: an update recorded just before a crash can come again (long polling
confirms an update when it asks for the next batch; a webhook when it answers 200). Each message is
recorded with its update id (``Event.delivery_id``), so the session recognises one it already recorded
and does not record or handle it twice, across restarts.

``api_base`` points the bot at another Bot API server: a self-hosted one, or a local stand-in in tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import secrets
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from baf.errors import MissingExtraError

try:  # first, so that a missing extra is named with its pip command rather than a bare ModuleNotFoundError
    import aiogram  # noqa: F401
except ImportError as exc:
    raise MissingExtraError("TelegramPlatform (aiogram)", "telegram") from exc

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import (
    BufferedInputFile,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    KeyboardButton,
    Message,
    ReplyKeyboardMarkup,
    Update,
    User,
)
from aiogram.utils.token import TokenValidationError, validate_token
from aiohttp import web
from pydantic import ValidationError

from baf.core.events import ApprovalEvent, Event, ReceiveFileEvent, ReceiveTextEvent
from baf.core.platform import Platform
from baf.core.session import runtime_side
from baf.errors import ConfigurationError
from baf.platforms.telegram.approvals import (
    Fate,
    button_data,
    html_to_plain,
    parse_button,
    request_fate,
    request_html,
)
from baf.platforms.telegram.markup import MESSAGE_LIMIT, render_html, split_message, utf16_length
from baf.platforms.telegram.outbox import ChatOutbox
from baf.platforms.telegram.status import StatusView

if TYPE_CHECKING:
    from baf.core.session import Session
    from baf.reasoning.approval import ApprovalDecision, ApprovalExpiry, ApprovalRequest

__all__ = ["SESSION_PREFIX", "TelegramPlatform"]

logger = logging.getLogger("baf.platforms.telegram")

#: Session ids are this prefix and the chat id.
SESSION_PREFIX = "telegram-"

#: The update types asked for; Telegram sends no others (a stand-in or a future API might: skipped).
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]

#: Telegram's limit for a caption, in UTF-16 units.
CAPTION_LIMIT = 1024

_SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_TYPING_EVERY = 4.5  # seconds; Telegram shows "typing" for 5 s or until the bot's next message
_REFUSAL = "This bot does not serve this chat."
_EDITED = "I read messages once, as they arrive: edits are not applied. Send the corrected text as a new message."
_UNSUPPORTED = "I can read text, photos and documents; this kind of message was not passed on."
#: Approval request messages remembered for editing (see TelegramPlatform._requests).
_REQUESTS_KEPT = 1000
#: How long (seconds) the platform looks for a pressed request's decision in the log before it stops
#: waiting to edit the message (the decision may be made by another worker, which owns the session).
_DECISION_WAIT = 30.0


class TelegramPlatform(Platform):
    """Serves an agent as a Telegram bot (long polling, or a webhook when ``webhook_url`` is given).

    Args:
        token: The bot token from @BotFather. Mark it secret with ``agent.mark_secret`` if your bodies
            could ever echo it; the platform never logs it.
        allowed_chats: Chat ids the bot serves; ``None`` serves every chat.
        refusal: Sent once per message to a chat that is not allowed; ``None`` sends nothing.
        max_file_size: Largest photo or document passed on, in bytes (the Bot API serves files up to
            20 MB). Files are recorded in the log, base64.
        step_edit_interval: Seconds between two edits of a chat's status message.
        webhook_url: The public HTTPS URL Telegram posts updates to. Given: webhook mode.
        webhook_host, webhook_port: Where the webhook server listens (port 0: a free one, see
            :attr:`webhook_port`). Behind a proxy, the proxy forwards ``webhook_url`` here.
        webhook_path: The path served; defaults to ``webhook_url``'s path.
        webhook_secret: Sent by Telegram with every update and compared in constant time; a random one
            is made when not given.
        api_base: Base URL of the Bot API server (``https://api.telegram.org`` when ``None``).
        polling_timeout: Seconds one long-polling request waits for updates.
        max_retries, max_retry_after: How a send that meets a 429 or a network error is retried (see
            :class:`~baf.platforms.telegram.outbox.ChatOutbox`).
        approvers: Telegram user ids who may approve or deny tool calls with the buttons; ``None`` lets
            anyone in the chat whose session asks decide (in a private chat, its user). A press from
            anyone else is refused and changes nothing.
    """

    name = "telegram"

    def __init__(
        self,
        token: str,
        *,
        allowed_chats: Iterable[int] | None = None,
        refusal: str | None = _REFUSAL,
        max_file_size: int = 10 * 1024 * 1024,
        step_edit_interval: float = 3.0,
        webhook_url: str | None = None,
        webhook_host: str = "127.0.0.1",
        webhook_port: int = 8443,
        webhook_path: str | None = None,
        webhook_secret: str | None = None,
        api_base: str | None = None,
        polling_timeout: int = 25,
        max_retries: int = 5,
        max_retry_after: float = 60.0,
        approvers: Iterable[int] | None = None,
    ) -> None:
        super().__init__()
        try:
            validate_token(token)
        except TokenValidationError:
            raise ConfigurationError("the Telegram token is malformed (expected digits, ':', then letters)") from None
        if max_file_size <= 0:
            raise ConfigurationError("max_file_size must be a positive number of bytes")
        self._token = token
        self.allowed_chats = None if allowed_chats is None else frozenset(int(chat) for chat in allowed_chats)
        self.refusal = refusal
        self.max_file_size = max_file_size
        self.step_edit_interval = step_edit_interval
        self.webhook_url = webhook_url
        self.webhook_host = webhook_host
        #: The webhook server's port (the real one once started, if 0 was asked).
        self.webhook_port = webhook_port
        self.webhook_path = webhook_path or (urlsplit(webhook_url).path or "/" if webhook_url else "/")
        self._webhook_secret = webhook_secret or secrets.token_urlsafe(32)
        self.api_base = api_base
        self.polling_timeout = polling_timeout
        self.approvers = None if approvers is None else frozenset(int(user) for user in approvers)
        self._outbox = ChatOutbox(max_retries=max_retries, max_retry_after=max_retry_after)
        self._bot: Bot | None = None
        self._username = ""
        self._poller: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self._typing: set[asyncio.Task[None]] = set()  # the typing indicators, and the approval messages'
        # edits waiting for their decision (both cancelled on stop)
        self._views: dict[int, StatusView] = {}
        # The approval requests this platform sent, by chat and call id: handles on messages already sent
        # (as the status views are), so a decision or an expiry made anywhere edits its message. Bounded;
        # a request not here (sent before a restart, or by another worker) is edited on a press instead.
        self._requests: OrderedDict[tuple[int, str], tuple[int, ApprovalRequest]] = OrderedDict()

    def __repr__(self) -> str:  # never the token
        mode = "webhook" if self.webhook_url else "polling"
        return f"TelegramPlatform({mode}, bot={self._username or '?'})"

    @property
    def bot(self) -> Bot:
        """The aiogram ``Bot`` (while started), for calls the platform does not make itself."""
        if self._bot is None:
            raise ConfigurationError("the Telegram platform is not started")
        return self._bot

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Check the token with ``getMe``, then start long polling or the webhook server."""
        session = AiohttpSession(api=TelegramAPIServer.from_base(self.api_base)) if self.api_base else AiohttpSession()
        self._bot = Bot(self._token, session=session)
        try:
            me = await self._bot.get_me()
            self._username = me.username or ""
            if self.webhook_url:
                await self._start_webhook()
            else:
                # getUpdates is refused while a webhook is set: polling takes over from one.
                await self._bot.delete_webhook(drop_pending_updates=False)
                self._poller = asyncio.ensure_future(self._poll())
        except TelegramUnauthorizedError:
            await self.stop()
            raise ConfigurationError("Telegram refused the bot token (401 Unauthorized)") from None
        except TelegramAPIError as exc:
            await self.stop()
            raise ConfigurationError(f"cannot start the Telegram bot: {exc}") from None
        logger.info("Telegram bot @%s is %s", self._username, "on its webhook" if self.webhook_url else "polling")

    async def _start_webhook(self) -> None:
        assert self._bot is not None and self.webhook_url is not None
        app = web.Application(client_max_size=1024 * 1024)  # an update is a few KB; files come by getFile
        app.router.add_post(self.webhook_path, self._on_webhook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.webhook_host, self.webhook_port)
        try:
            await site.start()
        except OSError as exc:
            raise ConfigurationError(
                f"the Telegram webhook cannot listen on {self.webhook_host}:{self.webhook_port}: {exc}"
            ) from exc
        self.webhook_port = self._runner.addresses[0][1]
        logger.info("Telegram webhook listening on %s:%s%s", self.webhook_host, self.webhook_port, self.webhook_path)
        await self._bot.set_webhook(
            self.webhook_url, secret_token=self._webhook_secret, allowed_updates=ALLOWED_UPDATES
        )

    async def stop(self) -> None:
        """Stop receiving, give queued sends up to 5 s, and close the bot's HTTP session. Safe twice."""
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        typing = list(self._typing)
        for task in typing:
            task.cancel()
        await asyncio.gather(*typing, return_exceptions=True)
        await self._outbox.drain(5.0)
        self._views.clear()
        bot, self._bot = self._bot, None
        if bot is not None:
            await bot.session.close()

    # -- inbound ----------------------------------------------------------------------------------

    async def _poll(self) -> None:
        offset: int | None = None
        failures = 0
        while True:
            bot = self._bot
            if bot is None:
                return
            try:
                updates = await bot.get_updates(
                    offset=offset,
                    timeout=self.polling_timeout,
                    allowed_updates=ALLOWED_UPDATES,
                    request_timeout=self.polling_timeout + 10,
                )
            except ClientDecodeError as exc:
                # One update aiogram cannot read must not block the ones after it: take them one by one.
                updates = self._each_update(exc.data)
            except TelegramRetryAfter as exc:
                logger.warning("getUpdates: 429, retrying after %s s", exc.retry_after)
                await asyncio.sleep(exc.retry_after)
                continue
            except (TelegramNetworkError, TelegramServerError, TelegramAPIError) as exc:
                failures += 1
                wait = min(2.0**failures, 30.0)
                logger.warning("getUpdates failed (%s); retrying in %g s", exc, wait)
                await asyncio.sleep(wait)
                continue
            failures = 0
            for update in updates:
                offset = max(offset or 0, update.update_id + 1)
                try:
                    await self.handle_update(update)
                except Exception:
                    # Not recorded (logged where it failed). The update is confirmed anyway: a log that
                    # refuses writes would refuse it again, and block every update behind it.
                    if update.message is not None:
                        self._send_text(update.message.chat.id, "I could not take that message; please send it again.")

    def _each_update(self, data: Any) -> list[Update]:
        raw = data.get("result") if isinstance(data, dict) else None
        if not isinstance(raw, list):
            logger.error("getUpdates answered something that is not a list of updates; skipped")
            return []
        updates = []
        for item in raw:
            update_id = item.get("update_id") if isinstance(item, dict) else None
            try:
                updates.append(Update.model_validate(item, context={"bot": self._bot}))
            except ValidationError as exc:
                logger.warning("update %s is malformed and was skipped: %s", update_id, exc.errors()[:1])
                if isinstance(update_id, int):  # still confirmed, so Telegram does not send it forever
                    updates.append(Update(update_id=update_id))
        return updates

    async def _on_webhook(self, request: web.Request) -> web.Response:
        given = request.headers.get(_SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self._webhook_secret.encode()):
            return web.Response(status=403, text="bad secret token")
        try:
            data = await request.json()
            update = Update.model_validate(data, context={"bot": self._bot})
        except (ValueError, ValidationError):
            return web.Response(status=400, text="not a Telegram update")
        try:
            await self.handle_update(update)
        except Exception:
            return web.Response(status=500, text="not recorded; send it again")  # Telegram retries
        return web.Response(text="ok")

    async def handle_update(self, update: Update) -> None:
        """Translate one update into an event for the agent (or an answer to the user, or nothing).

        Polling and the webhook both come here. Raises only when the agent could not record the
        message (so a webhook answers 500 and Telegram sends it again).
        """
        if update.message is not None:
            await self._on_message(update.message, update.update_id)
        elif update.callback_query is not None:
            await self._on_button(update.callback_query, update.update_id)
        elif update.edited_message is not None:
            if self._allowed(update.edited_message.chat.id):
                self._send_text(update.edited_message.chat.id, _EDITED)
        else:
            kinds = sorted((update.model_fields_set | set(update.model_extra or {})) - {"update_id"})
            logger.info("update %s of type %s skipped", update.update_id, ", ".join(kinds) or "unknown")

    def _allowed(self, chat_id: int) -> bool:
        return self.allowed_chats is None or chat_id in self.allowed_chats

    async def _on_message(self, message: Message, update_id: int) -> None:
        chat_id = message.chat.id
        if not self._allowed(chat_id):
            logger.warning("message from chat %s, which is not in allowed_chats: not passed on", chat_id)
            if self.refusal:
                self._send_text(chat_id, self.refusal)
            return
        session_id = f"{SESSION_PREFIX}{chat_id}"
        event: Event | None
        if message.text is not None:
            text = self._command_for_me(message.text)
            if text is None:
                return  # a command addressed to another bot in a group
            event = ReceiveTextEvent(session_id, message=text)
        elif message.document is not None or message.photo:
            event = await self._file_event(session_id, message)
            if event is None:
                return
        else:
            self._send_text(chat_id, _UNSUPPORTED)
            return
        if self.agent is None:
            raise ConfigurationError("the Telegram platform is not attached to an agent")
        # Update ids are per bot: the bot's id (the token's public part) makes them unique in a session.
        event.delivery_id = f"telegram:{self._token.partition(':')[0]}:{update_id}"
        try:
            done = await self.agent.receive_event(event, self)
        except Exception:
            logger.exception("chat %s: the agent could not record the message", chat_id)
            raise
        task = asyncio.ensure_future(self._show_typing(chat_id, done))
        self._typing.add(task)
        task.add_done_callback(self._typing.discard)

    def _command_for_me(self, text: str) -> str | None:
        """The text with ``@ThisBot`` dropped from a leading command; ``None`` if it names another bot."""
        if not text.startswith("/"):
            return text
        command, space, rest = text.partition(" ")
        name, at, bot = command.partition("@")
        if not at:
            return text
        if self._username and bot.lower() != self._username.lower():
            return None
        return f"{name}{space}{rest}"

    async def _file_event(self, session_id: str, message: Message) -> ReceiveFileEvent | None:
        chat_id = message.chat.id
        if message.document is not None:
            item: Any = message.document
            name = message.document.file_name or "document"
            mime_type = message.document.mime_type or ""
        else:
            assert message.photo
            # The largest size that fits: Telegram sends several resolutions of each photo.
            fitting = [p for p in message.photo if p.file_size is None or p.file_size <= self.max_file_size]
            item = max(fitting, key=lambda p: p.width * p.height) if fitting else message.photo[-1]
            name, mime_type = f"photo_{item.file_unique_id}.jpg", "image/jpeg"
        size = item.file_size
        if size is not None and size > self.max_file_size:
            self._send_text(chat_id, self._too_large(size))
            return None
        content = await self._download(chat_id, item.file_id)
        if content is None:
            return None
        event = ReceiveFileEvent.from_bytes(session_id, name, content, mime_type)
        event.caption = message.caption or ""
        return event

    def _too_large(self, size: int | None) -> str:
        shown = f"{size:,} bytes" if size is not None else "larger than the limit"
        return f"That file is too large ({shown}); this bot takes files up to {self.max_file_size:,} bytes."

    async def _download(self, chat_id: int, file_id: str) -> bytes | None:
        """The file's bytes, streamed and cut off past ``max_file_size`` (a size Telegram did not say,
        or said wrongly, is still enforced). ``None`` after telling the user why."""
        bot = self.bot
        try:
            file = await bot.get_file(file_id)
            if file.file_size is not None and file.file_size > self.max_file_size:
                self._send_text(chat_id, self._too_large(file.file_size))
                return None
            if not file.file_path:
                raise ValueError("Telegram gave no file_path")
            url = bot.session.api.file_url(bot.token, file.file_path)
            chunks: list[bytes] = []
            received = 0
            async for chunk in bot.session.stream_content(url, timeout=60):
                received += len(chunk)
                if received > self.max_file_size:
                    self._send_text(chat_id, self._too_large(None))
                    return None
                chunks.append(chunk)
            return b"".join(chunks)
        except Exception as exc:  # the token is in the URL: never log the exception text
            logger.warning("chat %s: could not download a file (%s)", chat_id, type(exc).__name__)
            self._send_text(chat_id, "I could not download that file from Telegram; please send it again.")
            return None

    async def _show_typing(self, chat_id: int, done: asyncio.Future[None]) -> None:
        """Keep "typing…" shown until the agent has handled the message."""
        while not done.done() and self._bot is not None:
            with contextlib.suppress(TelegramAPIError):  # cosmetic: a 429 here only skips one refresh
                await self._bot.send_chat_action(chat_id, "typing")
            await asyncio.wait([done], timeout=_TYPING_EVERY)

    # -- approvals: the buttons -------------------------------------------------------------------

    async def _on_button(self, query: CallbackQuery, update_id: int) -> None:
        """A press of an Approve / Deny button (see :mod:`baf.platforms.telegram.approvals`): checked, then
        an ``ApprovalEvent`` of the chat's session; always answered, so the button stops spinning."""
        pressed = parse_button(query.data)
        message = query.message
        if pressed is None or message is None:
            logger.info("a button press that is not an approval (update %s) was skipped", update_id)
            await self._answer(query, "This button does nothing here.")
            return
        approved, seq = pressed
        chat_id = message.chat.id
        if not self._allowed(chat_id):
            logger.warning("button press from chat %s, which is not in allowed_chats: refused", chat_id)
            await self._answer(query, self.refusal or _REFUSAL, alert=True)
            return
        if self.approvers is not None and query.from_user.id not in self.approvers:
            logger.warning("chat %s: user %s may not decide tool calls: press refused", chat_id, query.from_user.id)
            await self._answer(query, "You may not approve or deny tool calls for this bot.", alert=True)
            return
        if self.agent is None:
            raise ConfigurationError("the Telegram platform is not attached to an agent")
        session_id = f"{SESSION_PREFIX}{chat_id}"
        try:
            request, fate = request_fate(await self._read_log(session_id, seq - 1), seq)
        except Exception:
            logger.exception("chat %s: cannot read the approval request at seq %s", chat_id, seq)
            await self._answer(query, "Your decision could not be taken now; press the button again.")
            return
        if request is None:
            await self._answer(query, "There is no such request in this chat.", alert=True)
            return
        if fate is not None:  # decided (by someone else, or by this user twice) or expired: nothing to send
            await self._answer(query, fate.notice(), alert=True)
            self._edit_request(chat_id, message.message_id, request, fate)
            return
        known = (chat_id, request.call_id) in self._requests  # sent from here: its decision's delivery edits it
        event = ApprovalEvent(
            session_id, call_id=request.call_id, approved=approved, approver=_approver(query.from_user)
        )
        event.delivery_id = f"telegram:{self._token.partition(':')[0]}:{update_id}"  # a press sent again: once
        try:
            done = await self.agent.receive_event(event, self)
        except Exception:
            logger.exception("chat %s: the agent could not record a decision", chat_id)
            await self._answer(query, "Your decision could not be recorded; press the button again.")
            return
        await self._answer(query, "Approved." if approved else "Denied.")
        task = asyncio.ensure_future(self._show_decision(chat_id, message.message_id, session_id, seq, done, known))
        self._typing.add(task)
        task.add_done_callback(self._typing.discard)

    async def _read_log(self, session_id: str, after: int) -> list[Any]:
        assert self.agent is not None
        log = self.agent.runtime.log if self.agent.running else self.agent.log
        return list(await log.read(session_id, after))

    async def _answer(self, query: CallbackQuery, text: str, alert: bool = False) -> None:
        """Answer a button press (Telegram shows a spinner until then); a failure only costs the notice."""
        if self._bot is None:
            return
        try:
            await self._bot.answer_callback_query(query.id, text=text[:200], show_alert=alert or None)
        except TelegramAPIError as exc:
            logger.warning("could not answer a button press: %s", exc)

    async def _show_decision(
        self, chat_id: int, message_id: int, session_id: str, seq: int, done: asyncio.Future[None], known: bool
    ) -> None:
        """Once the decision is recorded (here, or by the worker that owns the session), edit the request's
        message to show it: what the log says, so a press that lost a race shows the decision that won.
        Unless ``reply_approval_decision`` did already (a request ``known`` here, and closed since)."""
        await asyncio.wait([done], timeout=_DECISION_WAIT)
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + _DECISION_WAIT, 0.1
        while True:
            try:
                request, fate = request_fate(await self._read_log(session_id, seq - 1), seq)
            except Exception as exc:  # the log is away: the buttons stay, a later press is checked again
                logger.warning("chat %s: cannot read the decision to show it: %s", chat_id, exc)
                return
            if request is not None and fate is not None:
                close = functools.partial(self._close_pressed, chat_id, message_id, request, fate, known)
                self._put(chat_id, "the approval message", close)
                return
            if loop.time() >= deadline:
                logger.warning("chat %s: no decision recorded for the request at seq %s yet", chat_id, seq)
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)

    async def _close_pressed(
        self, chat_id: int, message_id: int, request: ApprovalRequest, fate: Fate, known: bool
    ) -> None:
        if self._requests.pop((chat_id, request.call_id), None) is None and known:
            return  # closed already by the decision's own delivery (reply_approval_decision)
        await self._edit(chat_id, message_id, request, fate)

    def _edit_request(self, chat_id: int, message_id: int, request: ApprovalRequest, fate: Fate) -> None:
        """Queue an edit of the request's message to end with its fate."""
        self._put(chat_id, "the approval message", functools.partial(self._edit, chat_id, message_id, request, fate))

    async def _edit(self, chat_id: int, message_id: int, request: ApprovalRequest, fate: Fate) -> None:
        """Edit the request's message to end with its fate; the buttons go (an edit without markup)."""
        text = request_html(request, fate)
        try:
            await self.bot.edit_message_text(text, chat_id=chat_id, message_id=message_id, parse_mode="HTML")
        except TelegramBadRequest as exc:
            if "not modified" not in exc.message:  # shown already (a press and the decision, both edit it)
                raise

    # -- outbound ---------------------------------------------------------------------------------

    @staticmethod
    def chat_id_of(session: Session) -> int:
        """The chat a session talks to, from its id (``telegram-<chat id>``)."""
        if not session.id.startswith(SESSION_PREFIX):
            raise ValueError(f"session {session.id!r} is not a Telegram chat (ids start with {SESSION_PREFIX!r})")
        return int(session.id.removeprefix(SESSION_PREFIX))

    def _put(self, chat_id: int, what: str, send: Any) -> None:
        if self._bot is None:
            # A step that finished after the platform stopped (agent.stop stops platforms first).
            logger.warning("chat %s: the bot is stopped; %s was not sent (the log keeps it)", chat_id, what)
            return
        self._outbox.put(chat_id, what, send)

    def _send_text(self, chat_id: int, text: str, reply_markup: Any = None, quiet: bool = False) -> None:
        pieces = split_message(text, MESSAGE_LIMIT) or []
        for index, piece in enumerate(pieces):
            markup = reply_markup if index == len(pieces) - 1 else None
            send = functools.partial(self._send_html, chat_id, render_html(piece), piece, markup, quiet)
            self._put(chat_id, "a message", send)

    async def _send_html(self, chat_id: int, text: str, plain: str, reply_markup: Any, quiet: bool) -> Message:
        """Send ``text`` (Telegram HTML); ``plain`` instead should Telegram refuse to parse it."""
        bot = self.bot
        try:
            return await bot.send_message(
                chat_id, text, parse_mode="HTML", reply_markup=reply_markup, disable_notification=quiet or None
            )
        except TelegramBadRequest as exc:
            if "parse" not in exc.message.lower():
                raise
            # The renderer makes balanced, escaped HTML; should Telegram still refuse it, plain text
            # is better than nothing.
            logger.warning("chat %s: Telegram could not parse a reply's HTML (%s); sent as plain text", chat_id, exc)
            return await bot.send_message(chat_id, plain, reply_markup=reply_markup, disable_notification=quiet)

    async def reply(self, session: Session, message: str) -> None:
        """Queue a text reply (Markdown subset rendered, long text split) for the session's chat."""
        self._send_text(self.chat_id_of(session), message)

    async def reply_approval_request(self, session: Session, request: ApprovalRequest) -> None:
        """Send the request with Approve and Deny buttons (see :mod:`baf.platforms.telegram.approvals`)."""
        chat_id = self.chat_id_of(session)
        seq = runtime_side(session).delivery_seq  # the request's record: the buttons name it
        if seq is None:  # not a delivery after a commit (a direct call): no record to name, so no buttons
            await super().reply_approval_request(session, request)
            return
        keyboard = InlineKeyboardMarkup(
            inline_keyboard=[[
                InlineKeyboardButton(text="✅ Approve", callback_data=button_data(True, seq)),
                InlineKeyboardButton(text="❌ Deny", callback_data=button_data(False, seq)),
            ]]
        )  # fmt: skip
        text = request_html(request)

        async def send() -> None:
            sent = await self._send_html(chat_id, text, html_to_plain(text), keyboard, False)
            self._requests[(chat_id, request.call_id)] = (sent.message_id, request)
            while len(self._requests) > _REQUESTS_KEPT:
                self._requests.popitem(last=False)

        self._put(chat_id, "an approval request", send)

    async def reply_approval_decision(self, session: Session, decision: ApprovalDecision) -> None:
        """Edit the request's message to show the decision, whoever made it, and drop its buttons."""
        self._close_request(self.chat_id_of(session), decision.call_id, Fate(decision.approved, decision.by,
                                                                              decision.reason))  # fmt: skip

    async def reply_approval_expired(self, session: Session, expiry: ApprovalExpiry) -> None:
        """Edit the messages of the requests that expired to say so, and drop their buttons."""
        chat_id = self.chat_id_of(session)
        for call_id in expiry.call_ids:
            self._close_request(chat_id, call_id, Fate(None))

    def _close_request(self, chat_id: int, call_id: str, fate: Fate) -> None:
        async def close() -> None:
            # Looked up when the chat's queue reaches it: the request's own send, ahead in the queue, has
            # then made the handle.
            sent = self._requests.pop((chat_id, call_id), None)
            if sent is not None:
                await self._edit(chat_id, sent[0], sent[1], fate)

        self._put(chat_id, "the approval message", close)

    async def reply_options(self, session: Session, message: str, options: Sequence[str]) -> None:
        """Send ``message`` with a one-time reply keyboard, one button per option; a tap sends its text."""
        keyboard = ReplyKeyboardMarkup(
            keyboard=[[KeyboardButton(text=str(option)[:128])] for option in options],
            one_time_keyboard=True,
            resize_keyboard=True,
        )
        self._send_text(self.chat_id_of(session), message or "…", reply_markup=keyboard if options else None)

    async def reply_file(
        self, session: Session, name: str, content: bytes, mime_type: str = "", caption: str = ""
    ) -> None:
        """Send a document; a caption past Telegram's 1,024 characters follows as a message."""
        chat_id = self.chat_id_of(session)
        upload = BufferedInputFile(content, filename=name or "file")
        self._send_media(chat_id, "a document", "send_document", upload, caption)

    async def reply_image(
        self, session: Session, content: bytes, mime_type: str = "image/png", caption: str = ""
    ) -> None:
        """Send a photo (or a document, should Telegram refuse it as a photo)."""
        chat_id = self.chat_id_of(session)
        extension = (mime_type.rsplit("/", 1)[-1] or "png") if "/" in mime_type else "png"
        upload = BufferedInputFile(content, filename=f"image.{extension}")
        self._send_media(chat_id, "a photo", "send_photo", upload, caption)

    def _send_media(self, chat_id: int, what: str, method: str, upload: BufferedInputFile, caption: str) -> None:
        fits = utf16_length(caption) <= CAPTION_LIMIT

        async def send() -> None:
            bot = self.bot
            shown = render_html(caption) if caption and fits else None
            parse_mode = "HTML" if shown else None
            try:
                await getattr(bot, method)(chat_id, upload, caption=shown, parse_mode=parse_mode)
            except TelegramBadRequest:
                if method != "send_photo":
                    raise
                await bot.send_document(chat_id, upload, caption=shown, parse_mode=parse_mode)

        self._put(chat_id, what, send)
        if caption and not fits:
            self._send_text(chat_id, caption)

    # -- the status message -----------------------------------------------------------------------

    async def reply_reasoning_step(self, session: Session, step: Any) -> None:
        """Show the step in the chat's status message (a new one when a reasoning loop starts)."""
        data = step.to_dict() if hasattr(step, "to_dict") else dict(step)
        chat_id = self.chat_id_of(session)
        kind = data.get("kind")
        view = self._views.get(chat_id)
        if kind == "reasoning_started" or view is None:
            view = self._views[chat_id] = StatusView()
        if kind == "reasoning_finished":
            view.finished = True
            view.dirty = True
        elif kind != "reasoning_started":
            view.add_step(str(data.get("summary", "")))
        self._schedule_draw(chat_id, view)

    async def reply_task_list_update(self, session: Session, tasks: list[dict[str, Any]]) -> None:
        """Show the task list in the chat's status message."""
        chat_id = self.chat_id_of(session)
        view = self._views.get(chat_id)
        if view is None:
            view = self._views[chat_id] = StatusView()
        view.set_tasks(tasks)
        self._schedule_draw(chat_id, view)

    def _schedule_draw(self, chat_id: int, view: StatusView) -> None:
        if view.scheduled:
            return  # the queued draw will show this too
        view.scheduled = True
        loop = asyncio.get_running_loop()
        # The first draw sends the message at once, so it lands above the loop's answer; edits wait
        # for their slot.
        delay = 0.0 if view.message_id is None else view.drawn_at + self.step_edit_interval - loop.time()
        send = functools.partial(self._draw, chat_id, view)
        draw = functools.partial(self._put, chat_id, "the status message", send)
        if delay <= 0:
            draw()
        else:
            loop.call_later(delay, draw)

    async def _draw(self, chat_id: int, view: StatusView) -> None:
        view.scheduled = False
        if not view.dirty:
            return
        view.dirty = False
        # Taken before the call: a step arriving while it is under way waits for the next slot.
        view.drawn_at = asyncio.get_running_loop().time()
        bot = self.bot
        text = view.render()
        try:
            if view.message_id is None:
                sent = await bot.send_message(chat_id, text, parse_mode="HTML", disable_notification=True)
                view.message_id = sent.message_id
            else:
                await bot.edit_message_text(text, chat_id=chat_id, message_id=view.message_id, parse_mode="HTML")
        except TelegramBadRequest as exc:
            if "not modified" not in exc.message:
                raise
        except BaseException:
            view.dirty = True  # not drawn: the retry (or the next draw) still has something to show
            raise
        if view.finished and not view.dirty and self._views.get(chat_id) is view:
            del self._views[chat_id]
        elif view.dirty:
            self._schedule_draw(chat_id, view)


def _approver(user: User) -> str:
    """Who pressed, as the decision records it: ``telegram user <id> (@name)``."""
    name = f" (@{user.username})" if user.username else ""
    return f"telegram user {user.id}{name}"
