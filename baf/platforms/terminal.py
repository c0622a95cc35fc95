"""A chat in the terminal, rendered with rich: Markdown replies, a live reasoning trace, a task panel, a
streaming model's answer rendered as it is written, and a prompt for each tool call waiting for a human's
approval."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import errno
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar

from markdown_it import MarkdownIt
from markdown_it.token import Token
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.live import Live
from rich.markdown import Markdown, MarkdownElement, TableElement
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.segment import Segment
from rich.styled import Styled
from rich.table import Table
from rich.text import Text

from baf.core.events import ApprovalEvent
from baf.core.platform import Platform
from baf.core.session import runtime_side
from baf.errors import ConfigurationError, LogClosedError
from baf.log.printable import visible
from baf.wording import counted

if TYPE_CHECKING:
    from baf.core.session import Session
    from baf.reasoning.approval import ApprovalDecision, ApprovalExpiry, ApprovalRequest

__all__ = ["TerminalPlatform"]

logger = logging.getLogger(__name__)

_STATUS_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]", "skipped": "[-]"}
_QUIT_WORDS = {"exit", "quit", "/exit", "/quit"}
#: Reasoning steps whose ``details["text"]`` is what the model wrote (Markdown), shown rendered.
_MODEL_TEXT_STEPS = ("llm_text", "llm_tool_calls")
#: Seconds between two redraws of an answer being streamed: each redraw renders the whole answer's
#: Markdown again, which would cost more than the model's pace if done for every piece.
_REDRAW_EVERY = 0.08


class _TableElement(TableElement):
    """rich's Markdown table without its outer edge: rich draws the table with a blank top and bottom
    edge, which, added to the blank line kept between blocks, left two empty lines around every table."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for renderable in super().__rich_console__(console, options):
            if isinstance(renderable, Table):
                renderable.show_edge = False
            yield renderable


def _plain(text: str, style: str = "") -> Text:
    """Text to show as it is: never rich markup, and the characters a terminal acts on (escape sequences,
    bidirectional controls) written as escapes (``baf.log.printable``), as ``baf log`` shows them."""
    return Text(visible(text), style=style)


class _Markdown(Markdown):
    """rich's Markdown, except that HTML is text: rich drops HTML tags and blocks it does not render, so
    ``Ask me 'weather in <city>'.`` lost its ``<city>``. A reply is shown whole, whatever it holds: the
    characters a terminal acts on as escapes (``baf.log.printable``), those an HTML character reference
    spells (``&#x202E;``) too, and a link with its address after its text, never as a terminal hyperlink
    whose text hides where it goes. Tables sit one blank line from the text around them, as paragraphs do
    (see :class:`_TableElement`)."""

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {**Markdown.elements, "table_open": _TableElement}

    def __init__(self, markup: str, **options: Any) -> None:
        options.setdefault("hyperlinks", False)
        super().__init__(markup, **options)
        parser = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")
        self.parsed = parser.parse(markup)
        _shown_visible(self.parsed)


def _shown_visible(tokens: list[Token]) -> None:
    """Write the characters a terminal acts on as escapes in what ``tokens`` show, once parsed: the parser
    turns character references (``&#x202E;``, ``&rlm;``) into the characters themselves."""
    for token in tokens:
        token.content = visible(token.content)
        if token.children:
            _shown_visible(token.children)


class _TerminalConsole(Console):
    """rich's console, except that a closed stdout raises ``BrokenPipeError`` where rich would end the
    process itself (``SystemExit(1)`` from inside the running step), so the platform can end the chat."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, "the terminal's output was closed")


class TerminalPlatform(Platform):
    """One session (``session_id``) chatting on stdin/stdout. ``exit``, ``quit`` or EOF end it, and so
    does the output closing (``baf run ... | head``): the delivery that found it closed is recorded as a
    ``platform`` error, later output is dropped (the replies are still in the log) and the agent stops.
    (A ``console`` you pass keeps its own ``on_broken_pipe``: rich's default ends the process.)

    A fork (``baf.replay.fork``) cut before it handled a message holds that message; with
    ``continue_fork=True`` (what ``baf run --session ID`` sets) the chat continues it first, saying so;
    otherwise it stays held until the user continues it (``Agent.continue_session``, a new message).

    With a model that streams, the answer being written is shown rendered (Markdown, in the reply's panel)
    at the bottom of the terminal and redrawn as pieces arrive; the reply that completes it takes its
    place, so the screen holds the rendered answer once and never the raw pieces. On an output that is not
    a terminal (a pipe, a file) the pieces are not shown: only the reply is printed, as without streaming.

    In the reasoning trace, what the model wrote between tool calls (the text it sent with a call, an
    answer the loop sent back) is rendered as Markdown under its step's line, as a reply is; the final
    answer is only marked there, and shown whole in the reply's panel.

    A tool call waiting for approval is shown with its arguments, and before the next message the chat
    asks about it: ``y`` approves, ``n`` or an empty line denies, any other text denies with that text as
    the reason (the model reads it). The same happens for calls still waiting when the chat starts.

    Lines are read from ``input_fd`` if given. Otherwise a terminal is read with ``input()`` (line
    editing and history work), and piped or redirected input straight from its file descriptor.
    """

    name = "terminal"

    def __init__(
        self,
        session_id: str = "terminal",
        console: Console | None = None,
        prompt: str = "you> ",
        show_steps: bool = True,
        input_fd: int | None = None,
        continue_fork: bool = False,
    ) -> None:
        super().__init__()
        self.session_id = session_id
        self.console = console or _TerminalConsole()
        self.prompt = prompt
        self.show_steps = show_steps
        self._reader: asyncio.Task[None] | None = None
        self._input_fd = input_fd
        self._lines: _LineReader | None = None
        self._output_closed = False
        self.continue_fork = continue_fork
        # Whether the prompt is on screen, waiting for a line (a stop then ends that line first).
        self._prompting = False
        # What the session had recorded when the chat began: earlier conversation, shown as such.
        self._shown_upto: int | None = None
        self._streamed = _StreamedAnswer(self.console)

    @property
    def output_closed(self) -> bool:
        """Whether the chat ended because the terminal's output was closed."""
        return self._output_closed

    def share_with_workers(self) -> None:
        """Refused: a terminal is one person's, and worker processes would all read it and chat on one
        session that only one of them can run. ``baf serve`` stops the workers with this message."""
        raise ConfigurationError(
            "the terminal platform cannot be shared by worker processes (they would all read this "
            "terminal): serve the agent over a platform clients connect to, such as "
            "agent.use_websocket_platform(port=8765), or chat with it in one process with baf run"
        )

    async def start(self) -> None:
        self._lines = _raw_lines(self._input_fd)
        self._reader = asyncio.ensure_future(self._chat())

    async def stop(self) -> None:
        self._streamed.finish(keep=True)  # cut off before its reply: leave what was shown, rendered
        if self._prompting:
            self._prompting = False
            self._show("")  # Ctrl-C at the prompt: what the shell prints next starts on a line of its own
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def _chat(self) -> None:
        assert self.agent is not None, "add the platform to an agent first"
        agent = self.agent
        session = await agent.get_or_create_session(self.session_id, self)
        live = runtime_side(session)
        # What the log held before this run of the agent (0: the session started in this run).
        earlier = live.loaded_upto
        # Work the runtime found unfinished when it loaded the session (a step to resume, messages not
        # yet handled) is under way now.
        resumed = live.loaded_with_work
        self._show(_plain(f"session {self.session_id}{_where(agent.log)}", style="dim"), soft_wrap=True)
        # Bound between commits: what was delivered before is in the history printed here, what comes
        # after is printed live; nothing twice, nothing glued to a prompt.
        # The resumed work may finish before the history is read: the notice goes between what the log held
        # before the restart and anything that work produced, printed or live.
        await runtime_side(session).read_delivered(lambda upto: self._print_history(session, upto, earlier, resumed))
        # The prompt comes after what is under way: resumed work, or the initial state's body of a session
        # started now (its greeting would otherwise land after a prompt already waiting for the user).
        await agent.wait_idle(self.session_id)
        projection = runtime_side(session).projection
        held = len(projection.held)
        if projection.holding and self.continue_fork:
            what = [f"{counted(held, 'message')} not yet handled at its cut"] if held else []
            if projection.start_held:
                what.insert(0, "its initial state's body (cut before its first step)")
            self._show(Text(f"(this fork holds {' and '.join(what)}: handling it now)", style="yellow"))
            await agent.continue_session(self.session_id)
        while not self._output_closed:
            if not await self._decide_waiting_calls():
                break
            try:
                text = await self._read_line()
            except (EOFError, KeyboardInterrupt):
                break
            if text.strip().lower() in _QUIT_WORDS:
                break
            if not text.strip():
                continue
            try:
                await agent.receive_message(self.session_id, text, self)
            except Exception as exc:  # the log refused a write: say so, keep the prompt alive
                self._show(Panel(_plain(f"{type(exc).__name__}: {exc}"), title="error", style="red"))
        agent.request_stop()

    async def _decide_waiting_calls(self) -> bool:
        """Ask about each tool call of the chat's session that waits for approval, and send the answers
        (waiting until each is handled). False when the input ended meanwhile."""
        assert self.agent is not None
        session = self.agent.sessions.get(self.session_id)
        if session is None:
            return True
        waiting = [(call_id, entry["name"]) for call_id, entry in runtime_side(session).projection.approvals.items()
                   if not entry["decided"]]  # fmt: skip
        for call_id, tool in waiting:
            try:
                answer = (await self._read_line(f"approve {tool}? [y/N, or a reason to deny] ")).strip()
            except (EOFError, KeyboardInterrupt):
                return False
            approved = answer.lower() in ("y", "yes")
            reason = "" if approved or answer.lower() in ("", "n", "no") else answer
            event = ApprovalEvent(self.session_id, call_id=call_id, approved=approved, reason=reason,
                                  approver=f"terminal user {os.environ.get('USER') or ''}".strip())  # fmt: skip
            try:
                await (await self.agent.receive_event(event, self))
            except Exception as exc:  # the log refused a write: say so, keep the chat alive
                self._show(Panel(_plain(f"{type(exc).__name__}: {exc}"), title="error", style="red"))
        return True

    async def _read_line(self, prompt: str | None = None) -> str:
        """Read one line in a daemon thread: a blocked read must not keep the process alive after
        Ctrl-C, which a thread of the default executor would (it is joined at shutdown)."""
        shown = self.prompt if prompt is None else prompt
        loop = asyncio.get_running_loop()
        result: asyncio.Future[str] = loop.create_future()

        def settle(value: str | None, error: BaseException | None) -> None:
            if result.done():
                return
            if error is not None:
                result.set_exception(error)
            else:
                result.set_result(value or "")

        lines = self._lines

        def read() -> None:
            try:
                value, error = (lines.read_line() if lines else self.console.input(_plain(shown))), None
            except BaseException as exc:  # EOFError, KeyboardInterrupt, OSError: handed to the loop
                value, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop may be closed already
                loop.call_soon_threadsafe(settle, value, error)

        # An answer whose reply never came (its step was cut off) stays as it was shown, rendered.
        self._streamed.finish(keep=True)
        if lines is not None:
            self._show(_plain(shown), end="", highlight=False)
        self._prompting = True
        threading.Thread(target=read, name="baf-terminal-input", daemon=True).start()
        try:
            line = await result
        finally:
            self._prompting = False
        if lines is not None:
            # Nothing echoed a line read from a pipe or a file: show it after its prompt, so the transcript
            # reads as the chat went (and what follows starts on a line of its own).
            self._show(_plain(line), soft_wrap=True)
        return line

    async def _print_history(self, session: Session, upto: int, earlier: int, resumed: bool = False) -> None:
        """The conversation up to seq ``upto`` (what was delivered before the chat was bound); what the
        log held before this chat (up to seq ``earlier``) is marked as the earlier conversation. With
        ``resumed``, the notice that unfinished work is being finished follows it."""
        self._shown_upto = upto
        history = [entry for entry in session.chat_history() if entry.seq <= upto]
        before = [entry for entry in history if entry.seq <= earlier]
        if before:
            self._show(Rule(Text("earlier in this session", style="dim"), style="dim"))
        for entry in before:
            self._print_line(entry.role, entry.text)
        if before:
            self._show(Rule(Text("now", style="dim"), style="dim"))
        if resumed:
            self._show(Text("resumed after a restart: finishing what was under way when the agent stopped",
                            style="yellow"))  # fmt: skip
        for entry in history[len(before) :]:  # this run's: shown as live output is, replies in their panel
            self._print_line(entry.role, entry.text, session)

    def _show(self, *objects: Any, session: Session | None = None, **options: Any) -> None:
        """Print on the console, unless its output was closed. The first print that finds it closed
        ends the chat: a one-line notice on stderr, an ``error`` record in ``session`` if one is being
        served, and a stop request (as EOF on input makes). Not raised: every later reply would fail the
        same way, and the agent is stopping anyway."""
        if self._output_closed:
            return
        try:
            self.console.print(*objects, **options)
            self.console.file.flush()
        except BrokenPipeError as exc:
            self._output_lost(exc, session)

    def _output_lost(self, exc: BrokenPipeError, session: Session | None) -> None:
        """The output was found closed (see :meth:`_show`): end the chat."""
        self._output_closed = True
        logger.warning("terminal: the output was closed; stopping the agent (replies stay in the log)")
        if session is not None:
            with contextlib.suppress(LogClosedError):  # the agent stopped meanwhile
                session.record_error("platform", exc)
        if self.agent is not None:
            self.agent.request_stop()

    def _print_line(self, role: str, text: str, session: Session | None = None) -> None:
        """One entry of the conversation read from the log: the earlier conversation plain, dim for the
        user's lines; with ``session``, an entry of this run, a reply in its panel as when it is live."""
        if role == "user":
            self._show(_plain(f"{self.prompt}{text}", style="dim"))
        elif session is not None:
            self._show(_reply_panel(session, text))
        else:
            self._show(_Markdown(text))

    def _bound(self, session: Session) -> bool:
        """Whether live output for ``session`` is shown: for the chat's own session, not before the chat
        printed its history, which covers what came before (see _chat)."""
        return self._shown_upto is not None or session.id != self.session_id

    async def reply(self, session: Session, message: str) -> None:
        if not self._bound(session):
            return
        self._streamed.finish(session.id)  # the reply takes the place of the answer shown as it was written
        self._show(_reply_panel(session, message), session=session)

    async def reply_error(self, session: Session, message: str) -> None:
        if not self._bound(session):
            return
        self._streamed.finish(session.id)
        self._show(Panel(_plain(message), title="error", title_align="left", style="red"), session=session)

    async def reply_approval_request(self, session: Session, request: ApprovalRequest) -> None:
        """Show the call waiting for approval; the chat asks for the decision before the next message."""
        if not self._bound(session):
            return
        self._streamed.finish(session.id)  # what the model wrote with the call is not an answer
        body = _plain(f"{request.tool}({request.arguments})\ncall {request.call_id}: answer below (y approves)")
        self._show(Panel(body, title="approval needed", title_align="left", style="yellow"), session=session)

    async def reply_approval_decision(self, session: Session, decision: ApprovalDecision) -> None:
        """Say who decided a call that waited (here or on another channel), and why, as the web UI does."""
        if not self._bound(session):
            return
        mark, outcome, style = ("✓", "approved", "green") if decision.approved else ("✗", "denied", "red")
        by = f" by {decision.by}" if decision.by else ""
        reason = f": {decision.reason}" if decision.reason else ""
        self._show(_plain(f"{mark} {decision.tool} {outcome}{by}{reason}", style=style), session=session)

    async def reply_approval_expired(self, session: Session, expiry: ApprovalExpiry) -> None:
        """Say that calls which waited were dropped undecided."""
        if not self._bound(session):
            return
        calls = ", ".join(expiry.call_ids)
        self._show(_plain(f"· approval expired ({calls}): {expiry.reason or 'the conversation moved on'}",
                        style="yellow"), session=session)  # fmt: skip

    async def reply_reasoning_step(self, session: Session, step: Any) -> None:
        if not self.show_steps or not self._bound(session):
            return
        # Printed above the answer being written, which stays at the bottom until its reply comes.
        data = step.to_dict() if hasattr(step, "to_dict") else dict(step)
        kind = data.get("kind", "")
        if kind in ("reasoning_started", "reasoning_finished"):
            self._show(Rule(_plain(f"{kind.replace('_', ' ')}", style="dim"), style="dim"), session=session)
            return
        details = data.get("details")
        details = details if isinstance(details, dict) else {}
        written = details.get("text") if kind in _MODEL_TEXT_STEPS else None
        head = f"  · [{data.get('step', 0)}] {kind}:"
        if kind == "llm_text" and details.get("final"):
            # The reply that follows shows it whole, rendered: the trace only marks where it came.
            self._show(_plain(f"{head} the answer, below", style="dim"), session=session)
        elif isinstance(written, str) and written.strip():
            # What the model wrote is Markdown, as a reply is: rendered, not its one-line summary quoted
            # raw; under the step's line, indented and dim so it reads as part of the trace.
            summary = f" {data.get('summary', '')}" if kind != "llm_text" else ""
            self._show(_plain(head + summary, style="dim"), session=session)
            self._show(_trace_markdown(written), session=session)
        else:
            self._show(_plain(f"{head} {data.get('summary', '')}", style="dim"), session=session)

    async def reply_task_list_update(self, session: Session, tasks: list[dict[str, Any]]) -> None:
        if not self.show_steps or not tasks or not self._bound(session):
            return
        table = Table(title="tasks", show_header=False, box=None, title_justify="left", title_style="bold")
        for task in tasks:
            status = str(task.get("status", "pending"))
            mark = _STATUS_MARK.get(status, "[?]")
            result = f" — {task['result']}" if task.get("result") else ""
            # Text, not str: model-written descriptions must not be read as rich markup.
            table.add_row(Text(mark), _plain(f"{task.get('id')}. {task.get('description', '')}{result}"))
        self._show(table, session=session)

    async def reply_delta(self, session: Session, run_id: str, text: str) -> None:
        """Show the answer as the model writes it, rendered in the reply's panel at the bottom of the
        terminal; the reply that follows takes its place. Not shown on an output that is no terminal."""
        if not self._bound(session) or self._output_closed:
            return
        try:
            self._streamed.add(session, run_id, text)
        except BrokenPipeError as exc:
            self._streamed.finish()
            self._output_lost(exc, session)


def _trace_markdown(markdown: str) -> RenderableType:
    """What the model wrote in a step of the trace (text before tool calls, an answer it was sent back
    on): its Markdown rendered as a reply's is, indented under the step's line, dim."""
    return Styled(Padding(_Markdown(markdown), (0, 0, 0, 6)), "dim")


def _reply_panel(session: Session, markdown: str, subtitle: str | None = None) -> Panel:
    """A reply as the terminal shows it: its Markdown rendered in a panel titled with the agent's name."""
    return Panel(
        _Markdown(markdown),
        title=session.agent.name,
        title_align="left",
        subtitle=subtitle,
        subtitle_align="right",
        style="cyan",
    )


class _Tail:
    """The last lines of a renderable that fit the terminal's height (one line spare): while a long answer
    is written, its newest text stays in sight (``Live`` would cut the end off)."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options, pad=False)
        room = max(1, options.size.height - 1)
        for line in lines[-room:]:
            yield from line
            yield Segment.line()


class _StreamedAnswer:
    """The answer being streamed: its session, run and text so far, shown in a transient ``rich`` Live
    region (what is printed meanwhile, a reasoning step, goes above it). A new run supersedes what the
    old one showed. :meth:`finish` erases it when the reply (or an error) takes its place."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.session: Session | None = None
        self.run_id: str | None = None
        self.pieces: list[str] = []
        self.live: Live | None = None
        self._drawn_at = 0.0
        self._redraw: asyncio.TimerHandle | None = None

    def add(self, session: Session, run_id: str, text: str) -> None:
        """A piece of ``run_id``'s answer: redraw (at most every ``_REDRAW_EVERY`` seconds)."""
        console = self.console
        if not console.is_terminal or console.is_dumb_terminal:
            return  # a pipe or a file gets the reply alone: no cursor moves, no raw pieces left in it
        if self.session is None or (session.id, run_id) != (self.session.id, self.run_id):
            self.session, self.run_id, self.pieces = session, run_id, []
        self.pieces.append(text)
        wait = self._drawn_at + _REDRAW_EVERY - time.monotonic()
        if wait <= 0:
            self._draw()
        elif self._redraw is None:
            self._redraw = asyncio.get_running_loop().call_later(wait, self._draw_later)

    def _draw_later(self) -> None:
        self._redraw = None
        with contextlib.suppress(BrokenPipeError):  # the next print finds it closed and ends the chat
            self._draw()

    def _draw(self, live: Live | None = None, subtitle: str | None = "writing…") -> None:
        if self.session is None:
            return
        self._drawn_at = time.monotonic()
        shown = _Tail(_reply_panel(self.session, "".join(self.pieces), subtitle))
        live = live or self.live
        if live is None:
            self.live = Live(shown, console=self.console, auto_refresh=False, transient=True,
                             redirect_stdout=False, redirect_stderr=False)  # fmt: skip
            self.live.start(refresh=True)
        else:
            live.update(shown, refresh=True)

    def finish(self, session_id: str | None = None, *, keep: bool = False) -> None:
        """End the answer being shown (of ``session_id``, if given): erased, or with ``keep`` left on the
        screen as it was written, rendered."""
        if self.session is None or (session_id is not None and session_id != self.session.id):
            return
        if self._redraw is not None:
            self._redraw.cancel()
            self._redraw = None
        live = self.live
        self.live = None
        # A closed output is found and handled by the next print (TerminalPlatform._show).
        with contextlib.suppress(BrokenPipeError):
            try:
                if live is not None and keep:
                    self._draw(live, subtitle=None)
                    live.transient = False
                elif live is not None:
                    live.update(Text(""), refresh=True)
            finally:
                if live is not None:
                    live.stop()
        self.session, self.run_id, self.pieces = None, None, []


def _raw_lines(fd: int | None) -> _LineReader | None:
    """The reader for ``fd``, or for standard input when it is a pipe or a file; None for a terminal or
    a stdin without a descriptor (an IDE, a notebook), which ``input()`` reads."""
    if fd is not None:
        return _LineReader(fd)
    try:
        fd = sys.stdin.fileno()
        interactive = os.isatty(fd)
    except (AttributeError, ValueError, OSError):  # None, a StringIO, a closed stream
        return None
    return None if interactive else _LineReader(fd)


class _LineReader:
    """Lines from a file descriptor, read with ``os.read`` and decoded as UTF-8.

    Not through ``sys.stdin``: a thread blocked in its ``readline`` holds the buffered reader's lock,
    and an interpreter exiting meanwhile (Ctrl-C) dies with a fatal error when it cannot take that lock
    to shut the stream down. ``os.read`` holds no Python lock while it waits. (A terminal is read with
    ``input()``, which goes through readline, not the buffered reader.)
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._buffer = ""

    def read_line(self) -> str:
        """The next line without its newline; ``EOFError`` at the end of the input."""
        while "\n" not in self._buffer:
            chunk = os.read(self._fd, 65536)
            if not chunk:
                self._buffer += self._decoder.decode(b"", final=True)
                if not self._buffer:
                    raise EOFError
                line, self._buffer = self._buffer, ""
                return line.removesuffix("\r")
            self._buffer += self._decoder.decode(chunk)
        line, self._buffer = self._buffer.split("\n", 1)
        return line.removesuffix("\r")


def _where(log: object) -> str:
    """``, recorded in FILE`` for a log with a file (what ``baf replay`` reads), else the empty string."""
    path = getattr(log, "path", None)
    return f", recorded in {path}" if path is not None else ""
