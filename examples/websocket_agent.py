"""The reasoning demo in the browser: a WebSocket server with the chat UI, on http://localhost:8765/.

Run it with ``python examples/websocket_agent.py`` (or ``baf run examples/websocket_agent.py``), open the
address it prints, and click one of the suggested questions (``PORT=8800`` before the command serves another
port, ``PORT=0`` any free one). The trace of the model's turns and tool calls opens as it works, the task
list fills on the right, and the answer arrives as Markdown (tables included).
Close the tab, or stop and start the server: the conversation comes back, because the resume tokens' secret
is kept beside the log (``websocket_demo.db.websocket-secret``, readable by you only).

Needs the ``web`` extra (``pip install -e ".[web]"``). The model: with ``OPENAI_API_KEY`` set, ``BAF_MODEL``
(default ``gpt-4o-mini``) on OpenAI or the server named by ``OPENAI_BASE_URL``; without a key, an offline
scripted model plays the assistant, so the example runs anywhere. Sessions are recorded in
``websocket_demo.db``: ``baf sessions websocket_demo.db`` lists them.
"""

from __future__ import annotations

import os

from baf.library.demo import EXAMPLE_QUESTIONS, build_demo_agent, demo_llm, print_intro

llm = demo_llm()
agent = build_demo_agent("sqlite:///websocket_demo.db", llm)

# Loopback only: nobody else on the network can reach it. The questions show as buttons in an empty chat.
# PORT picks another port (0: any free one).
web = agent.use_websocket_platform(host="127.0.0.1", port=int(os.environ.get("PORT", "8765")),
                                   examples=EXAMPLE_QUESTIONS[:3])  # fmt: skip

print_intro(llm, how_to_stop="Ask in the browser; Ctrl-C stops the server.")

if __name__ == "__main__":
    agent.run()  # prints the address; Ctrl-C stops it
