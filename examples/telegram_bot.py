"""A Telegram bot that keeps notes: send it text to note down, a photo or document to keep, /list to
see what it kept, /clear to start over.

    pip install -e ".[telegram]"      # in a clone of baf
    TELEGRAM_BOT_TOKEN=123456:ABC... python examples/telegram_bot.py

Talk to your bot in Telegram (create it with @BotFather). Optional settings:
``TELEGRAM_ALLOWED_CHATS`` (comma-separated chat ids the bot serves; the refusal a stranger gets names
their chat id in the log), ``TELEGRAM_API_BASE`` (another Bot API server). Notes live in the session
log, ``telegram_notes.db``: stop the bot, start it again, and /list still shows them.
"""

from __future__ import annotations

import os

from baf import Agent, ReceiveFileEvent, Session

HELP = (
    "Send me text to note it down, a photo or a document to keep it. "
    "**/list** shows the notes, **/clear** forgets them."
)


def notes_body(session: Session) -> None:
    event = session.event
    if event is None:
        return  # the session's start: the user's first message is handled next
    notes: list[str] = session.get("notes", [])
    if isinstance(event, ReceiveFileEvent):
        notes.append(f"file {event.name} ({len(event.content):,} bytes){': ' + event.caption if event.caption else ''}")
        session.set("notes", notes)
        session.reply(f"Kept `{event.name}`.")
        return
    text = (event.text or "").strip()
    if text in ("/start", "/help"):
        session.reply(HELP)
    elif text == "/list":
        listed = "\n".join(f"{i}. {note}" for i, note in enumerate(notes, 1))
        session.reply(listed or "No notes yet.")
    elif text == "/clear":
        session.delete("notes")
        session.reply_options("Forgotten. What next?", ["/list", "/help"])
    else:
        notes.append(text)
        session.set("notes", notes)
        session.reply(f"Noted ({len(notes)} so far).")


def build_agent(
    token: str,
    log: str = "sqlite:///telegram_notes.db",
    api_base: str | None = None,
    allowed_chats: list[int] | None = None,
) -> Agent:
    """The notes agent, served as a Telegram bot with ``token``."""
    agent = Agent("telegram_notes", log=log)
    agent.mark_secret(token)  # a token echoed by a body never reaches the log or a chat
    notes = agent.new_state("notes", initial=True)
    notes.set_body(notes_body)
    notes.when_event().go_to(notes)
    agent.use_telegram_platform(token, api_base=api_base, allowed_chats=allowed_chats)
    return agent


def main() -> None:
    token = os.environ.get("TELEGRAM_BOT_TOKEN")
    if not token:
        raise SystemExit("set TELEGRAM_BOT_TOKEN to your bot's token (from @BotFather)")
    chats = os.environ.get("TELEGRAM_ALLOWED_CHATS")
    allowed = [int(chat) for chat in chats.split(",") if chat.strip()] if chats else None
    build_agent(token, api_base=os.environ.get("TELEGRAM_API_BASE"), allowed_chats=allowed).run()


if __name__ == "__main__":
    main()
