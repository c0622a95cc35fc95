"""A payments assistant whose larger payments wait for a human's approval (docs/human_approval.md).

Run it in a terminal with ``python examples/human_approval.py`` (or ``baf run examples/human_approval.py``)
and ask ``pay Alice 250 for the design work``: the call waits, the chat shows it and asks; ``y`` approves,
``n`` or a reason denies (the model reads the reason). ``pay Bob 40`` runs at once: the policy only asks
about payments over 100.

The browser UI is added only when you ask for it: ``python examples/human_approval.py --web`` serves it at
http://127.0.0.1:8765/ instead of the terminal chat, and the call shows with Approve and Deny buttons
(needs the ``web`` extra). ``baf run`` always chats in the terminal (it takes no ``--web``);
``examples/websocket_agent.py`` is the example that serves the browser UI by default.

Everything runs offline: a small function plays the model (set ``OPENAI_API_KEY`` to use a real one).
The waiting call survives a restart: stop the agent while it waits, start it again, and the chat asks
again. Sessions are recorded in ``human_approval.db``; ``baf replay human_approval.db terminal`` shows
who approved what, and when.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLM, LLMResponse, ToolCall
from baf.llm.openai_llm import LLMOpenAI
from baf.testing import FunctionLLM

agent = Agent("payments", log="sqlite:///human_approval.db")
ledger: list[str] = []


def over_100(session: Any, call: ToolCall) -> bool:
    """The approval policy: a human decides on payments over 100; smaller ones just run."""
    return float(json.loads(call.arguments).get("amount", 0)) > 100


@agent.tool(requires_approval=over_100)
def send_payment(to: str, amount: float, note: str = "") -> str:
    """Send a payment.

    Args:
        to: Who is paid.
        amount: How much, in euros.
        note: What it is for.
    """
    ledger.append(f"{amount:.2f} EUR to {to}")
    return f"sent {amount:.2f} EUR to {to}" + (f" ({note})" if note else "")


def offline_model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse | str:
    """Plays the assistant: ``pay NAME AMOUNT [for ...]`` becomes a payment; a tool result is reported."""
    last = messages[-1]
    if last["role"] == "tool":
        content = str(last["content"])
        return f"Not sent. {content.removeprefix('Error: ')}" if content.startswith("Error") else f"Done: {content}"
    match = re.match(r"\s*pay\s+(\w+)\s+(\d+(?:\.\d+)?)(?:\s+for\s+(.*))?", str(last.get("content")), re.I)
    if match is None:
        return "Tell me whom to pay and how much, for example: pay Alice 250 for the design work."
    to, amount, note = match.group(1), float(match.group(2)), match.group(3) or ""
    arguments = json.dumps({"to": to, "amount": amount, "note": note})
    return LLMResponse(tool_calls=[ToolCall(f"pay-{len(messages)}", "send_payment", arguments)])


llm: LLM = (
    LLMOpenAI(os.environ.get("BAF_MODEL") or "gpt-4o-mini")
    if os.environ.get("OPENAI_API_KEY")
    else (FunctionLLM(offline_model, name="offline-payments"))
)
assistant = new_reasoning_state(agent, llm, enable_task_planning=False,
                                system_prompt="You send payments for the user with send_payment.")  # fmt: skip
assistant.when_event().go_to(assistant)

if __name__ == "__main__":
    if "--web" in sys.argv:
        agent.use_websocket_platform(port=8765)
    else:
        agent.use_terminal_platform()
    agent.run()
