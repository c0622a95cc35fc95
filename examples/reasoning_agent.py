"""A reasoning agent that answers questions about a folder of business files, using two tools.

Run it in a terminal with ``baf run examples/reasoning_agent.py`` (``baf demo`` runs the same agent).
Ask, for example, "Which region grew fastest this year?" and watch the trace: the model plans tasks,
lists the workspace, reads the sales CSV, calls ``calculate`` once per region, and answers.

The model: with ``OPENAI_API_KEY`` set, ``BAF_MODEL`` (default ``gpt-4o-mini``) on OpenAI, or on any
OpenAI-compatible server named by ``OPENAI_BASE_URL`` (vLLM, Ollama, llama.cpp, ...). Without a key, an
offline scripted model plays the assistant, so the example runs anywhere.

The sample files ship inside baf (``baf/library/demo_workspace``) so that ``baf demo`` works from an
installed package; point ``new_workspace`` at your own folder to ask about your files. Sessions are
recorded in ``reasoning_demo.db``: read one with ``baf log reasoning_demo.db terminal``.
"""

from __future__ import annotations

import os

from baf import Agent
from baf.library.demo import (
    DEMO_SYSTEM_PROMPT,
    DEMO_WORKSPACE,
    OfflineDemoLLM,
    calculate,
    csv_summary_tool,
    print_intro,
)
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLM
from baf.llm.openai_llm import LLMOpenAI

llm: LLM
if os.environ.get("OPENAI_API_KEY"):
    llm = LLMOpenAI(os.environ.get("BAF_MODEL") or "gpt-4o-mini", base_url=os.environ.get("OPENAI_BASE_URL") or None)
else:
    llm = OfflineDemoLLM()

agent = Agent("reasoning_demo", log="sqlite:///reasoning_demo.db")

# A read-only folder: the model gets list_directory and read_file, and cannot change anything.
files = agent.new_workspace(
    DEMO_WORKSPACE,
    name="files",
    description="Sample files of Larkspur Outfitters: 2024 sales by region, product notes, meeting notes.",
)

# Two tools: a safe arithmetic evaluator, and CSV totals over the workspace's files.
agent.new_tool(calculate)
agent.add_tool(csv_summary_tool(files))

# One state whose body is the plan → act → observe loop; every message loops back into it.
reasoning = new_reasoning_state(agent, llm, system_prompt=DEMO_SYSTEM_PROMPT, max_steps=12)
reasoning.when_event().go_to(reasoning)

# Say which model plays the assistant (clearly, when it is the offline one) before the chat starts.
print_intro(llm)

if __name__ == "__main__":  # `python examples/reasoning_agent.py` works as well as `baf run`
    agent.use_terminal_platform()
    agent.run()
