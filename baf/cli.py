"""The ``baf`` command: run an agent, run the demo, and read and check session logs."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import math
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from baf.core.agent_file import loading_agent_file
from baf.errors import ConfigurationError, LogError, LogInUseError, SessionNotFoundError
from baf.log import SessionLog, SQLiteLog, open_log
from baf.log.redaction import Redactor
from baf.replay.render import NARROW, fit_columns, records_plain, short_data, visible, visible_json
from baf.wording import agreeing, counted

if TYPE_CHECKING:
    from baf.core.agent import Agent

__all__ = [
    "find_agent",
    "from_user_code",
    "load_agent_file",
    "load_agent_module",
    "main",
    "open_existing_log",
    "user_traceback",
]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``baf`` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        result: int = args.handler(args)
        if sys.stdout is not None:  # None: started with stdout closed
            sys.stdout.flush()  # inside the try: a reader that went away must not fail at exit instead
        return result
    except Exception as exc:
        if from_user_code(exc):
            # A bug in the user's agent file (a BrokenPipeError too: their own pipe or socket, not our
            # stdout): its traceback is what they need, from their code on, as Python would show it.
            sys.stderr.write(user_traceback(exc))
            return 1
        if isinstance(exc, BrokenPipeError):
            return _stdout_closed()
        if isinstance(exc, SessionNotFoundError) and isinstance(getattr(args, "log", None), str):
            # A mistyped or half-copied id: say where the right one is.
            return _fail(args.command, f"{exc}; baf sessions {shlex.quote(_shown(args.log))} lists them")
        if isinstance(exc, (ConfigurationError, FileNotFoundError, IsADirectoryError, NotADirectoryError,
                            PermissionError, ValueError, LookupError, LogError)):  # fmt: skip
            return _fail(args.command, exc)
        raise


def _fail(command: str, error: object) -> int:
    """Print ``baf COMMAND: error`` on stderr; the exit status of usage and configuration errors.

    Redacted: an error may quote what the user typed (a session id holding a key of the environment)."""
    shown = Redactor.from_environment().redact_text(f"baf {command}: {error}")
    Console(stderr=True, highlight=False).print(Text(visible(shown), style="red"), soft_wrap=True)
    return 2


def _stdout_closed() -> int:
    """Whoever read stdout is gone (``baf log ... | head``): stop quietly, as Python's signal docs advise.

    stdout is pointed at devnull so the interpreter's final flush of what is still buffered does not fail
    again at exit; 141 (128 + SIGPIPE) is what a shell reports for a command cut off the same way.
    """
    with contextlib.suppress(OSError, ValueError):  # a stdout without a file descriptor (as in tests)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 141


class _Stdout(Console):
    """The console for a command's output. rich ends the process itself (status 1) when stdout is closed;
    this leaves it to :func:`main`, so every command ends the same way."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


#: Set on an exception raised by the user's own code under ``baf run`` / ``--rerun``.
_FROM_USER_CODE = "_baf_from_user_code"


def from_user_code(exc: BaseException) -> bool:
    """Whether ``exc`` came from the user's agent file (or a module it imports) while baf loaded it."""
    return bool(getattr(exc, _FROM_USER_CODE, False))


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc``, raised by the user's agent file while baf loaded it, from the user's
    first frame on: the frames before it (baf's loader, importlib, ``runpy``, ``asyncio``) say nothing
    about the bug. A syntax error, which has no frame of the user's, shows its line and caret."""
    import sysconfig
    import traceback

    # With the separator: a user's folder beside baf's (``.../baf_agents/``) must not pass for baf's own.
    baf_folder = str(Path(__file__).resolve().parent) + os.sep
    standard_library = sysconfig.get_paths()["stdlib"].rstrip(os.sep) + os.sep

    def ours(filename: str) -> bool:
        return filename.startswith(("<frozen ", baf_folder, standard_library))

    frames = exc.__traceback__
    while frames is not None and ours(frames.tb_frame.f_code.co_filename):
        frames = frames.tb_next
    return "".join(traceback.format_exception(type(exc), exc, frames))


@contextlib.contextmanager
def _user_code() -> Iterator[None]:
    """Mark exceptions from the user's code, so :func:`main` does not shorten them to one line.

    baf's own configuration and log errors are the exception: they name the problem (a log file that
    cannot be opened names the file) and its fix, and their traceback only points into baf.
    """
    try:
        yield
    except (ConfigurationError, LogError):
        raise
    except Exception as exc:
        with contextlib.suppress(AttributeError):  # an exception type without a __dict__
            setattr(exc, _FROM_USER_CODE, True)
        raise


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are printed as baf's other errors are: redacted and with the
    characters a terminal acts on escaped (they quote what was typed, which may be a pasted key or an id
    holding escape sequences). Its subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        """Print the usage and ``message`` (redacted, made visible) on stderr; exit with status 2."""
        self.print_usage(sys.stderr)
        shown = Redactor.from_environment().redact_text(f"{self.prog}: error: {message}")
        self.exit(2, visible(shown) + "\n")


#: How a session id that starts with ``-`` is given (argparse reads it as an option otherwise).
_DASHED = "an id starting with '-' goes after '--' (LOG -- -id)"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="baf", description="baf: event-sourced state-machine agents.")
    commands = parser.add_subparsers(dest="command")

    run = commands.add_parser("run", help="run the agent defined in a Python or YAML file on the terminal")
    run.add_argument(
        "path",
        help="a Python file that defines an Agent (named 'agent', or the only one), or a YAML agent file (.yaml, .yml)",
    )
    run.add_argument(
        "--session",
        default=None,
        help="session id of the terminal chat (default: terminal); a fork's messages held at its cut are handled first",
    )
    run.add_argument(
        "--log",
        default=None,
        help="the log file or URL to run over instead of the one the file names (as for a fork in another log)",
    )
    run.set_defaults(handler=_cmd_run)

    demo = commands.add_parser("demo", help="run the reasoning demo (offline unless OPENAI_API_KEY is set)")
    demo.add_argument("--log", default=None, help="log file or URL (default: reasoning_demo.db in the working folder)")
    demo.add_argument(
        "--session",
        default=None,
        help="session id of the terminal chat (default: terminal); a fork's messages held at its cut are handled first",
    )
    demo.set_defaults(handler=_cmd_demo)

    serve = commands.add_parser(
        "serve", help="run the agent in a Python or YAML file as N worker processes over one PostgreSQL log"
    )
    serve.add_argument("path", help="a Python file that defines an Agent, or a YAML agent")
    serve.add_argument("--log", required=True, help="the PostgreSQL log: postgresql://user@host:port/database")
    serve.add_argument("--workers", type=_count(1), default=1, help="worker processes on this host (default 1)")
    serve.add_argument(
        "--lease-ttl",
        type=float,
        default=10.0,
        help="seconds a dead worker's sessions wait before others take them over (default 10)",
    )
    serve.add_argument(
        "--poll-interval",
        type=float,
        default=2.0,
        help="seconds between safety polls for missed notifications (default 2, at least 1)",
    )
    serve.add_argument(
        "--keepalive",
        type=float,
        default=30.0,
        help="seconds after which a database connection whose other end went silent is given up, on both "
        "ends (TCP keepalive; default 30, at least 1; 0 leaves the operating system's settings)",
    )
    serve.set_defaults(handler=_cmd_serve)

    sessions = commands.add_parser("sessions", help="list the sessions of a log")
    sessions.add_argument("log", nargs="?", help=f"a log file or URL (default: {DEFAULT_LOG_FILE} in this folder)")
    output = sessions.add_mutually_exclusive_group()
    output.add_argument(
        "--plain", action="store_true", help="for scripts: a header, then one session a line, tab-separated"
    )
    output.add_argument("--json", action="store_true", help="for scripts: one JSON object per session and line")
    sessions.set_defaults(handler=_cmd_sessions)

    log = commands.add_parser("log", help="print the records of a session")
    log.add_argument("log", nargs="?", help=f"a log file or URL (default: {DEFAULT_LOG_FILE} in this folder)")
    log.add_argument("session", nargs="?", help=f"the session id (without it: the sessions to pick from); {_DASHED}")
    output = log.add_mutually_exclusive_group()
    output.add_argument(
        "--plain",
        action="store_true",
        help="a header, then one record a line, tab-separated (what a file or a pipe gets)",
    )
    output.add_argument("--json", action="store_true", help="one JSON object per line")
    log.set_defaults(handler=_cmd_log)

    schema = commands.add_parser("schema", help="print the JSON schema of YAML agent files (for editors)")
    schema.set_defaults(handler=_cmd_schema)

    _add_replay_parser(commands)
    _add_export_parser(commands)

    check = commands.add_parser(
        "check", help="read a whole log and report what is damaged (exit status 1 if anything is)"
    )
    check.add_argument("log", help="a log file or URL (opened read-only)")
    check.set_defaults(handler=_cmd_check)
    return parser


# -- loading agents -------------------------------------------------------------------------------


def load_agent_module(path: str | Path) -> Any:
    """Import the Python file at ``path`` as a module (its folder goes on ``sys.path`` for its imports)."""
    file = Path(path).resolve()
    if not file.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(file.stem, file)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = module
    with loading_agent_file(file):  # an agent.run() at its top level is refused (see baf.core.agent_file)
        spec.loader.exec_module(module)
    return module


def find_agent(module: Any) -> Agent:
    """The module's agent: its ``agent`` attribute, else its only ``Agent`` instance."""
    from baf.core.agent import Agent

    candidate = getattr(module, "agent", None)
    if isinstance(candidate, Agent):
        return candidate
    # One agent may be bound to several names: count agents, name each by its first name.
    named = {id(value): (name, value) for name, value in reversed(vars(module).items()) if isinstance(value, Agent)}
    agents = [value for _, value in named.values()]
    where = Path(module.__file__).name if getattr(module, "__file__", None) else module.__name__
    if not agents:
        raise ConfigurationError(
            f"{where} must define one Agent at module level (named 'agent', or its only one); it defines none "
            "(an Agent built inside a function, or under if __name__ == '__main__':, is not seen)"
        )
    if len(agents) > 1:
        names = ", ".join(sorted(name for name, _ in named.values()))
        raise ConfigurationError(
            f"{where} must define one Agent (or name the one to run 'agent'); it defines {len(agents)}: {names}"
        )
    return agents[0]


def load_agent_file(path: str | Path) -> Agent:
    """The agent a file defines: a YAML agent (``.yaml``/``.yml``) or a Python file (see :func:`find_agent`)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no such file: {path}")
    if Path(path).suffix.lower() in (".yaml", ".yml"):
        from baf.declarative import load_agent

        with _user_code():  # a tool or body module of the file may fail to import: its traceback helps
            return load_agent(path)
    with _user_code():
        module = load_agent_module(path)
    return find_agent(module)


def _cmd_run(args: argparse.Namespace) -> int:
    agent = load_agent_file(args.path)
    if args.log is not None:
        agent.log = open_log(_log_url(args.log))  # the file's own log is never opened
    from baf.platforms.terminal import TerminalPlatform  # here: markdown rendering is slow to import

    terminals = [platform for platform in agent.platforms if isinstance(platform, TerminalPlatform)]
    if not agent.platforms:
        terminals = [agent.use_terminal_platform(session_id=args.session or "terminal")]
    elif args.session is not None and not terminals:
        raise ConfigurationError(
            f"--session picks the terminal chat's session, and agent {agent.name!r} has no "
            "terminal platform (its file adds other platforms)"
        )
    if args.session is not None:
        for terminal in terminals:
            # Naming the session is the user asking for it: a fork's held messages are handled first.
            terminal.session_id, terminal.continue_fork = args.session, True
    with _user_code():
        agent.run()
    if any(isinstance(platform, TerminalPlatform) and platform.output_closed for platform in agent.platforms):
        return _stdout_closed()  # ended as any command whose reader went away (`| head`)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from baf.log.postgres_leases import MAX_LEASE_TTL

    if not Path(args.path).is_file():
        raise FileNotFoundError(f"no such file: {args.path}")
    if not args.log.lower().startswith(("postgresql://", "postgres://")):
        raise ConfigurationError(
            "baf serve runs many workers over one PostgreSQL log: --log postgresql://...; "
            "for one process on SQLite use baf run"
        )
    # Written so that nan fails too (every comparison with it is false), and inf (a poll that never comes).
    if not 1 <= args.poll_interval < math.inf:
        raise ConfigurationError(
            f"--poll-interval must be a finite number of seconds, at least 1, got {args.poll_interval}"
        )
    if not 0 < args.lease_ttl <= MAX_LEASE_TTL:
        raise ConfigurationError(
            f"--lease-ttl must be positive and at most {MAX_LEASE_TTL:g} seconds (a day), got {args.lease_ttl}"
        )
    if args.keepalive != 0 and not 1 <= args.keepalive < math.inf:
        raise ConfigurationError(
            f"--keepalive must be 0 (the system's settings) or a finite number of seconds, at least 1, got "
            f"{args.keepalive}"
        )
    from baf.serve.process import serve

    return serve(args.path, args.log, args.workers, args.lease_ttl, args.poll_interval, args.keepalive or None)


def _cmd_schema(args: argparse.Namespace) -> int:
    from baf.declarative import agent_schema

    print(json.dumps(agent_schema(), indent=2, ensure_ascii=False))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from baf.library.demo import run_demo

    run_demo(log=None if args.log is None else _log_url(args.log), session_id=args.session)
    return 0


def _log_url(target: str) -> str:
    """A log URL for ``target``, which may also be a plain file path (read as a SQLite file, as
    ``baf replay`` reads it). The path is percent-encoded, so that a ``?``, ``#`` or ``%`` in a file
    name stays part of the name instead of starting a query or a fragment."""
    return target if "://" in target else "sqlite:///" + quote(target)


# -- reading logs ---------------------------------------------------------------------------------


def _shown(target: str) -> str:
    """``target`` as the commands print it: a database URL without its password (``redact_dsn``)."""
    if "://" not in target:
        return target
    from baf.log.postgres import redact_dsn  # asyncpg itself is imported only to connect

    return redact_dsn(target)


def open_existing_log(target: str, *, read_only: bool = True) -> SessionLog:
    """Open a log by URL or file path, refusing to create a new empty file by mistake.

    A SQLite or PostgreSQL log is opened read-only unless ``read_only=False`` (``--fork-at``, which
    appends): reading it must not change it (no WAL switch, no tables added to a foreign database).
    A plain path names the file as it is: it is not parsed as a URL, so ``?``, ``#`` and ``%`` are
    part of the name.
    """
    if "://" not in target:
        log: SessionLog = SQLiteLog(target, read_only=read_only)
    elif target.lower().startswith(("sqlite:", "postgresql:", "postgres:")):
        log = open_log(target, read_only=read_only)
    else:
        log = open_log(target)
    if isinstance(log, SQLiteLog) and not log.path.exists():
        # A URL short of its slashes is a file name here (a plain path is never parsed): say what was meant.
        meant = target.lower().startswith(("sqlite:", "postgresql:", "postgres:")) and "://" not in target
        hint = " (a log URL: sqlite:///relative/path.db, postgresql://user@host:port/database)" if meant else ""
        raise FileNotFoundError(f"no such log{'' if '://' in target else ' file'}: {target}{hint}")
    return log


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


#: The log an agent writes by default (``Agent(name)`` without ``log=``): what ``baf sessions`` and
#: ``baf log`` read when no log is given.
DEFAULT_LOG_FILE = "baf.db"


def _default_log(command: str, rest: str = "") -> str:
    """``baf.db`` in the working folder, if it is there; otherwise a usage error saying what to pass."""
    if Path(DEFAULT_LOG_FILE).is_file():
        return DEFAULT_LOG_FILE
    found = sorted(p.name for p in Path().glob("*.db"))[:5]
    hint = f" (log files here: {', '.join(found)})" if found else ""
    raise _UsageError(
        f"no log given, and there is no {DEFAULT_LOG_FILE} in this folder: pass a log file or URL, "
        f"e.g. baf {command} {found[0] if found else 'path/to/agent.db'}{rest}{hint}"
    )


class _UsageError(ValueError):
    """A command line that cannot be run as given; :func:`main` prints it and exits with status 2."""


def _cmd_sessions(args: argparse.Namespace) -> int:
    from baf.replay.commands import report_unreadable
    from baf.replay.reading import session_rows
    from baf.replay.render import render_sessions, session_records, sessions_plain

    if args.log is None:
        args.log = _default_log("sessions")

    async def collect() -> list[dict[str, Any]]:
        async with open_existing_log(args.log) as log:
            return await session_rows(log)

    rows = asyncio.run(collect())
    if args.json:
        for line in session_records(rows):
            print(visible_json(json.dumps(line, ensure_ascii=False)))
    elif args.plain:
        print("\n".join(sessions_plain(rows)))
    else:
        render_sessions(_Stdout(), rows, f"sessions in {_shown(args.log)}")  # the list `baf replay LOG` shows
    return report_unreadable(rows, "sessions")


def _cmd_log(args: argparse.Namespace) -> int:
    if args.log is None:
        args.log = _default_log("log", " SESSION")
    if args.session is None:
        return _pick_a_session(args.log)

    async def collect() -> list[Any]:
        async with open_existing_log(args.log) as log:
            return await log.read(args.session)

    records = asyncio.run(collect())
    if not records:
        raise SessionNotFoundError(args.session, _shown(args.log))
    redactor = Redactor.from_environment()  # as replay and export: a log written before a key was set
    if redactor.active:
        records = [redactor.redact_record(r) for r in records]
    console = _Stdout()
    if args.json:
        for r in records:
            line = {
                "session_id": r.session_id,
                "seq": r.seq,
                "ts": r.ts,
                "kind": r.kind,
                "version": r.version,
                "data": r.data,
            }
            print(visible_json(json.dumps(line, ensure_ascii=False)))
        return 0
    columns = fit_columns(console)
    if args.plain or columns is None:
        # To a file or a pipe: a table would be as wide as its widest record on every line.
        print("\n".join(records_plain(records)))
        return 0
    table = Table(title=Text(visible(f"session {redactor.redact_text(args.session)}")))
    # seq, time and kind keep their line (a kind is what one passes to --kind); the data folds.
    for column in ("seq", "time", "kind"):
        table.add_column(column, no_wrap=True, justify="right" if column == "seq" else "left")
    table.add_column("data", overflow="fold", ratio=1)
    short = columns < NARROW  # the year and a box's width left to the data
    if short:
        table.box, table.collapse_padding, table.pad_edge = box.SIMPLE_HEAD, True, False
    for r in records:
        when = datetime.fromtimestamp(r.ts).strftime("%m-%d %H:%M:%S") if short and r.ts else _when(r.ts)
        table.add_row(str(r.seq), when, Text(visible(r.kind)), Text(short_data(r)))
    console.print(table)
    return 0


def _pick_a_session(target: str) -> int:
    """``baf log LOG`` without a session: say how to ask for one, with the sessions there are."""
    from baf.replay.reading import session_rows
    from baf.replay.render import render_sessions

    async def collect() -> list[dict[str, Any]]:
        async with open_existing_log(target) as log:
            return await session_rows(log)

    rows = asyncio.run(collect())
    stderr = Console(stderr=True, highlight=False)
    stderr.print(
        Text(visible(f"baf log: which session? baf log {_shown(target)} SESSION"), style="red"), soft_wrap=True
    )
    if rows:
        render_sessions(stderr, rows, f"sessions in {_shown(target)}")
    return 2


def _cmd_check(args: argparse.Namespace) -> int:
    """``baf check LOG``: the store's checks and baf's own (``baf.log.check``); 0 sound, 1 damaged."""
    from baf.log.check import CheckReport, Finding, check_log
    from baf.log.sqlite_check import check_storage

    async def collect() -> Any:
        log = open_existing_log(args.log)
        try:
            await log.start()
        except LogError as exc:
            if not isinstance(log, SQLiteLog):
                raise
            # Too damaged to open as a log: what SQLite itself can still say about the file.
            report = CheckReport(findings=[Finding(f"it cannot be opened as a log: {exc}")])
            for damage, message in await check_storage(log.path, has_checksums=False):
                report.findings.append(Finding(message, damage=damage))
            return report
        try:
            return await check_log(log)
        finally:
            await log.close()

    report = asyncio.run(collect())
    console = _Stdout(highlight=False)
    read = f"{counted(report.sessions, 'session')}, {counted(report.records, 'record')} read"
    console.print(Text(visible(f"{_shown(args.log)}: {read}")), soft_wrap=True)
    for finding in report.findings:
        style = "red" if finding.damage else "yellow"
        label = "damaged" if finding.damage else "note"
        console.print(Text(visible(f"{label}: {finding}"), style=style), soft_wrap=True)
    damage = sum(finding.damage for finding in report.findings)
    if damage:
        problems = counted(damage, "problem")
        console.print(Text(visible(f"{_shown(args.log)} is damaged: {problems} found"), style="red"), soft_wrap=True)
        return 1
    console.print(Text(visible(f"{_shown(args.log)}: no damage found"), style="green"), soft_wrap=True)
    return 0


# -- replay and export (the work is in baf.replay.commands) ---------------------------------------


def _count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum`` (argparse reports anything else as a usage error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, not {value}")
        return value

    return parse


_SEQ = _count(1)  # seqs start at 1
_PAGE_DEFAULT = 50


def _add_replay_parser(commands: Any) -> argparse.ArgumentParser:
    replay = commands.add_parser("replay", help="a session's timeline, its state at any record, or the session list")
    replay.add_argument("log", help="a log file or URL")
    replay.add_argument("session", nargs="?", help=f"the session id (without it: list the sessions); {_DASHED}")
    replay.add_argument(
        "--kind",
        action="append",
        default=[],
        metavar="K",
        help="only entries with records of kind K (repeatable, or comma-separated)",
    )
    replay.add_argument("--from", dest="from_seq", type=_SEQ, metavar="SEQ", help="only from this seq on")
    replay.add_argument("--to", dest="to_seq", type=_SEQ, metavar="SEQ", help="only up to this seq")
    replay.add_argument("--grep", metavar="TEXT", help="only entries containing TEXT (case-insensitive)")
    replay.add_argument("--json", action="store_true", help="print the (filtered) records, one JSON object per line")
    replay.add_argument(
        "--follow",
        action="store_true",
        help="keep printing records as they are appended (waits for a session not yet started)",
    )
    replay.add_argument("--at", type=_SEQ, metavar="SEQ", help="the session as it stood after record SEQ")
    replay.add_argument("--interactive", action="store_true", help="step through the timeline (h for help)")
    # None until given, so that giving them without a SESSION can be refused; filled in by _cmd_replay.
    replay.add_argument(
        "--limit", type=_count(0), metavar="N", help=f"entries per page (0: all; default {_PAGE_DEFAULT})"
    )
    replay.add_argument("--expand", action="store_true", help="show every entry's full data")
    replay.add_argument(
        "--width", type=_count(0), metavar="N", help="characters of text shown per entry (0: no limit; default 160)"
    )
    replay.add_argument(
        "--rerun",
        metavar="AGENT_FILE",
        help="re-run the agent in this Python or YAML file over the session; report the first divergence",
    )
    replay.add_argument("--fork-at", type=_SEQ, metavar="SEQ", help="copy the session up to SEQ into a new session")
    replay.set_defaults(handler=_cmd_replay, usage_error=replay.error)
    return replay


def _add_export_parser(commands: Any) -> argparse.ArgumentParser:
    export = commands.add_parser("export", help="export a session as JSON lines or OpenTelemetry spans")
    export.add_argument("log", help="a log file or URL")
    export.add_argument("session", help=f"the session id; {_DASHED}")
    export.add_argument(
        "--format",
        choices=["jsonl", "otel"],
        default="jsonl",
        help="jsonl: the records; otel: OTLP/JSON spans (GenAI semantic conventions)",
    )
    export.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    export.set_defaults(handler=_cmd_export)
    return export


#: ``baf replay`` options that act on one session, by their ``argparse`` dest, with their spelling.
_SESSION_OPTIONS = {
    "kind": "--kind", "from_seq": "--from", "to_seq": "--to", "grep": "--grep", "json": "--json",
    "follow": "--follow", "at": "--at", "interactive": "--interactive", "limit": "--limit",
    "expand": "--expand", "width": "--width", "rerun": "--rerun", "fork_at": "--fork-at",
}  # fmt: skip


def _cmd_replay(args: argparse.Namespace) -> int:
    from baf.replay.commands import ReplayOptions, replay
    from baf.replay.render import DEFAULT_WIDTH

    if args.session is None:
        # Without SESSION the sessions are listed: an option meant for one session would be ignored.
        given = [flag for dest, flag in _SESSION_OPTIONS.items() if getattr(args, dest) not in (None, False, [])]
        if given:
            args.usage_error(f"{', '.join(given)} {agreeing(len(given), 'needs', 'need')} a SESSION")
    if args.rerun or args.fork_at is not None:
        return _rerun_or_fork(args)
    kinds = frozenset(k.strip() for value in args.kind for k in value.split(",") if k.strip())
    options = ReplayOptions(
        session=args.session, kinds=kinds, from_seq=args.from_seq, to_seq=args.to_seq, grep=args.grep,
        json=args.json, follow=args.follow, at=args.at, interactive=args.interactive,
        limit=_PAGE_DEFAULT if args.limit is None else args.limit, expand=args.expand,
        width=DEFAULT_WIDTH if args.width is None else args.width,
    )  # fmt: skip

    async def go() -> int:
        async with open_existing_log(args.log) as log:
            return await replay(log, options, _Stdout(highlight=False), _shown(args.log))

    try:
        return asyncio.run(go())
    except KeyboardInterrupt:
        return 130


def _rerun_or_fork(args: argparse.Namespace) -> int:
    from baf.replay.cli_hooks import fork_command, print_rerun_report
    from baf.replay.rerun import rerun as rerun_report

    # The report goes to stdout; what the agent's own code prints (a banner at import, a body's prints
    # during the re-run) goes to stderr, so the report stays the report (`> report.txt`, a CI check).
    console = _Stdout(highlight=False, file=sys.stdout)
    agent = None
    if args.rerun:
        with contextlib.redirect_stdout(sys.stderr):
            agent = load_agent_file(args.rerun)  # a YAML agent as well as a Python file, as `baf run` takes

    async def go() -> int:
        # A re-run only reads the log (it runs on a fresh in-memory one); a fork appends to it.
        async with open_existing_log(args.log, read_only=agent is not None) as log:
            if agent is not None:
                with contextlib.redirect_stdout(sys.stderr):
                    report = await rerun_report(log, args.session, agent)
                return print_rerun_report(report, console)
            return await fork_command(log, args.session, args.fork_at, console, _shown(_log_url(args.log)))

    try:
        return asyncio.run(go())
    except LogInUseError as exc:
        if agent is not None:
            raise
        # The refusal is worded for any opening for writing ("or open the log read-only"); a fork writes.
        who = exc.holder or "another process"
        which = "that process"
        if str(exc.path).startswith(("postgresql:", "postgres:")):
            which += " (every baf serve worker, when workers write it)"
        raise LogInUseError(
            exc.path,
            exc.holder,
            reason=f"a fork appends its new session to this log, which {who} is writing now: stop {which}, "
            "fork, then start it again; nothing was written",
        ) from None


def _cmd_export(args: argparse.Namespace) -> int:
    from baf.replay.commands import run_export

    return run_export(open_existing_log(args.log), args.session, args.format, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
