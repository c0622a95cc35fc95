"""What ``baf replay LOG SESSION --rerun AGENT.py`` and ``--fork-at SEQ`` do (called from ``baf.cli``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from baf.library.demo import DEMO_AGENT_NAME
from baf.log import RecordKind, SessionLog
from baf.log.printable import shell_word
from baf.log.redaction import Redactor
from baf.replay.fork import fork
from baf.replay.render import visible
from baf.replay.rerun import RerunReport, rerun

if TYPE_CHECKING:
    from baf.core.agent import Agent

__all__ = ["fork_command", "print_rerun_report", "rerun_command"]


async def rerun_command(log: SessionLog, session_id: str, agent: Agent, console: Console) -> int:
    """Re-run ``agent`` over the session and print the report; exit status 0 when identical, 1 if not."""
    return print_rerun_report(await rerun(log, session_id, agent), console)


def print_rerun_report(report: RerunReport, console: Console) -> int:
    """Print a re-run's report (redacted); exit status 0 when identical, 1 if not."""
    style = "green" if report.identical else "red"
    console.print(Text(visible(Redactor.from_environment().redact_text(str(report))), style=style))
    return 0 if report.identical else 1


async def fork_command(log: SessionLog, session_id: str, at_seq: int, console: Console, log_url: str) -> int:
    """Fork the session at ``at_seq`` and print the new session id and how to continue it: on the log at
    ``log_url`` (as shown: without its password), which the agent's file may not name."""
    new_id = await fork(log, session_id, at_seq)
    records = await log.read(new_id)
    # Ids are shown redacted, as everywhere in the CLI: one typed (or stored) before a key was set may
    # hold it. (An agent refuses such an id anyway, so the fork's id is not lost to its user.)
    redact = Redactor.from_environment().redact_text
    session_id, new_id = redact(session_id), redact(new_id)
    forked = Text(visible(f"forked {session_id} at seq {at_seq} into session "))
    console.print(forked + Text(visible(new_id), style="bold"))
    # The log does not know which file defines the agent (a Python file or a YAML one): name the agent.
    started = next((r for r in records if r.kind == RecordKind.SESSION_STARTED), None)
    agent_name = started.data.get("agent") if started is not None else None
    whose = f" (the .py or .yaml file that defines agent {agent_name!r})" if isinstance(agent_name, str) else ""
    # --option=VALUE: an id starting with "-" (a session "-h" forks into "-h@5") would be taken for an option.
    # shell_word: an id holding control characters is written $'...', which the shell reads back as it is.
    options = f"--log={shell_word(log_url)} --session={shell_word(new_id)}"
    command = f"baf run AGENT_FILE {options}"
    if agent_name == DEMO_AGENT_NAME:  # the demo's agent is baf's own, defined in no file of the user's
        command, whose = f"baf demo {options}", ""
    if "$'" in options:
        whose += " (quoted for bash or zsh)"
    console.print(Text(visible(f"continue it in the terminal: {command}{whose}")), soft_wrap=True)
    python = f"await agent.continue_session({new_id!r}) (an Agent with log={log_url!r})"
    console.print(Text(visible(f"or in Python: {python}")), soft_wrap=True)
    origin = records[-1].data
    held = [f"message {', '.join(f'#{seq}' for seq in origin.get('held') or [])}"] if origin.get("held") else []
    if origin.get("start_held"):
        held.insert(0, "the initial state's body")
    if held:
        console.print(
            Text(
                f"it holds {' and '.join(held)}, not run at the cut: nothing runs until you continue it "
                "(baf run, agent.continue_session or a new message)",
                style="yellow",
            )
        )
    return 0
