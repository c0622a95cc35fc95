"""A small agent with three states: it greets, asks how you are, and answers in kind.

Run it in a terminal with ``baf run examples/greetings_agent.py``. Sessions are stored in
``greetings.db``: stop it, run it again, and it remembers where the conversation was.
"""

from __future__ import annotations

from baf import Agent, ReceiveTextEvent, Session

agent = Agent("greetings_agent", log="sqlite:///greetings.db")

greeting = agent.new_state("greeting", initial=True)
asking = agent.new_state("asking_mood")
answering = agent.new_state("answering")


def greet(session: Session) -> None:
    # Entered at the session's start (no event) and again, silently, after each answer.
    if session.event is None:
        session.reply("Hi! Say hello when you want to chat.")


def ask_mood(session: Session) -> None:
    session.set("greetings", session.get("greetings", 0) + 1)
    session.reply(f"Hello there! (greeting number {session.get('greetings')}) How are you today?")


def answer(session: Session) -> None:
    text = (session.event.text or "").lower() if session.event else ""
    session.set("last_mood", text)
    if any(word in text for word in ("bad", "sad", "tired", "awful")):
        session.reply("Sorry to hear that. Say hello again whenever you like.")
    else:
        session.reply("Glad to hear it! Say hello again whenever you like.")


def is_greeting(session: Session) -> bool:
    text = (session.event.text or "").lower() if session.event else ""
    return any(word in text.split() for word in ("hello", "hi", "hey"))


greeting.set_body(greet)
greeting.set_fallback_body(lambda session: session.reply("Say hello first."))
asking.set_body(ask_mood)
answering.set_body(answer)

greeting.when_event(ReceiveTextEvent).with_condition(is_greeting).go_to(asking)
asking.when_event(ReceiveTextEvent).go_to(answering)
answering.go_to(greeting)
