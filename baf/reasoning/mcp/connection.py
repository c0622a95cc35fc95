"""The live connection to one MCP server: started and stopped with the runtime, restarted when it dies.

One supervisor task owns the ``mcp`` SDK's :class:`mcp.Client` (its anyio scopes must be entered and
left by the same task) and runs it until :meth:`MCPConnection.stop`, or until the connection is lost:
the server process ended (its stderr closed), a call found the connection closed, or the change
subscription dropped. A lost connection is opened again, up to ``max_restarts`` times per start, with
a short back-off; after that the server's tools answer with a :class:`~baf.errors.ToolServerError`.

A stdio server's stderr goes line by line to the ``baf.mcp.<name>`` logger, each line cut at 8 KiB;
the last lines are quoted when the server fails to start or dies.

When the server says its tool list changed (``notifications/tools/list_changed``, or the
``subscriptions/listen`` stream of the 2026 protocol), the tools are listed again and handed to
``on_listing``, one listing at a time, a listing overtaken by a newer change listed again rather than
handed on; so they are after every restart.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from baf.errors import ConfigurationError, ToolError, ToolListingError, ToolServerError
from baf.reasoning.mcp.content import render_content
from baf.reasoning.mcp.names import ListingEntry, checked_listing

__all__ = ["MCPConnection", "ServerSpec"]

#: Listing pages read before a listing is taken as complete: a server that pages forever cannot hang us.
_MAX_PAGES = 100
_STDERR_TAIL = 20
#: Bytes of one line of a server's stderr that are logged; the rest of a longer line is dropped.
_STDERR_LINE = 8192
_STDERR_CHUNK = 65536


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """How to reach one MCP server: a command to run (stdio) or a URL (streamable HTTP)."""

    name: str
    command: tuple[str, ...] | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    start_timeout: float = 30.0
    max_restarts: int = 3

    def describe(self) -> str:
        """The command line or URL, for messages."""
        return " ".join(self.command) if self.command else str(self.url)


#: A server's tools, each with its input schema checked (in a worker thread, see :func:`_list_tools`).
Listing = list[ListingEntry]


class MCPConnection:
    """A supervised connection to the MCP server ``spec`` (see the module docstring)."""

    def __init__(self, spec: ServerSpec, on_listing: Callable[[Listing], None]) -> None:
        self.spec = spec
        self.on_listing = on_listing
        self.logger = logging.getLogger(f"baf.mcp.{spec.name}")
        self.restarts = 0
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._given_up: str | None = None
        self._ready = asyncio.Event()  # set while a client is up, or when there will be none
        self._wake = asyncio.Event()  # the supervisor's cue: stop, or the connection was lost
        self._tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL)
        self._changes = 0  # list changes announced by the server; a listing is current if none came since
        self._relisting = False

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> Listing:
        """Connect and return the first listing.

        Raises:
            ConfigurationError: the server could not be started or reached, or did not answer within
                ``start_timeout`` seconds (the message quotes the last lines of its stderr).
        """
        self._stopping, self._given_up, self.restarts = False, None, 0
        self._ready, self._wake = asyncio.Event(), asyncio.Event()
        first: asyncio.Future[Listing] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._supervise(first), name=f"baf-mcp-{self.spec.name}")
        try:
            async with asyncio.timeout(self.spec.start_timeout):
                return await asyncio.shield(first)
        except TimeoutError:
            await self.stop()
            raise ConfigurationError(
                f"MCP server {self.spec.name!r} ({self.spec.describe()}) did not answer within "
                f"{self.spec.start_timeout:g} seconds of starting{self._stderr_note()}"
            ) from None
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Close the connection (a stdio server is told to exit, then terminated); never raises."""
        self._stopping = True
        self._wake.set()
        self._ready.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            try:
                # The SDK's own shutdown is bounded (stdin closed, 2 s, SIGTERM, 2 s, SIGKILL).
                await asyncio.wait_for(asyncio.shield(task), timeout=10)
            except TimeoutError:
                task.cancel()
                self.logger.warning("MCP server %r did not shut down in time; abandoned", self.spec.name)
            except Exception:  # a shutdown failure must not stop the runtime's stop
                self.logger.exception("MCP server %r: error while shutting down", self.spec.name)

    async def _supervise(self, first: asyncio.Future[Listing]) -> None:
        while not self._stopping:
            self._wake = asyncio.Event()
            problem = "the connection was closed"
            try:
                async with self._open() as client:
                    listing = await _list_tools(client)
                    if first.done():
                        self.on_listing(listing)
                    else:
                        first.set_result(listing)
                    self._client = client
                    self._ready.set()
                    async with self._listening(client):
                        await self._wake.wait()
            except Exception as exc:
                problem = f"{type(exc).__name__}: {exc}"
                if not first.done():
                    error = ConfigurationError(
                        f"MCP server {self.spec.name!r} ({self.spec.describe()}) could not be started: "
                        f"{_reason(exc)}{self._stderr_note()}"
                    )
                    error.__cause__ = _unwrapped(exc)  # set here: start() raises it, in another task
                    first.set_exception(error)
                    return
            finally:
                self._client = None
                self._ready.clear()
            if self._stopping:
                return
            if not first.done():
                first.set_exception(ConfigurationError(
                    f"MCP server {self.spec.name!r} ({self.spec.describe()}) closed the connection while "
                    f"starting{self._stderr_note()}"
                ))  # fmt: skip
                return
            if self.restarts >= self.spec.max_restarts:
                self._given_up = f"it stopped {self.restarts + 1} times, the last time: {problem}"
                self.logger.error("MCP server %r %s; not restarting it again%s", self.spec.name, self._given_up,
                                  self._stderr_note())  # fmt: skip
                self._ready.set()
                return
            self.restarts += 1
            self.logger.warning("MCP server %r stopped (%s); restarting it (%d of at most %d)%s", self.spec.name,
                                problem, self.restarts, self.spec.max_restarts, self._stderr_note())  # fmt: skip
            await asyncio.sleep(min(0.1 * 2 ** (self.restarts - 1), 2.0))

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[Any]:
        """An entered ``mcp.Client`` for the server (the process started, for stdio)."""
        from mcp import Client

        if self.spec.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's defaults: a response may stream a while
            async with httpx2.AsyncClient(headers=dict(self.spec.headers), timeout=timeout) as http:
                transport = streamable_http_client(self.spec.url, http_client=http)
                async with Client(transport, cache=None, message_handler=self._on_message) as client:
                    _without_result_schema_check(client)
                    yield client
            return
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert self.spec.command is not None
        command, *args = self.spec.command
        params = StdioServerParameters(command=command, args=args, env=dict(self.spec.env or {}), cwd=self.spec.cwd)
        errlog = self._stderr_pipe()
        try:
            async with Client(stdio_client(params, errlog=errlog), cache=None,
                              message_handler=self._on_message) as client:  # fmt: skip
                errlog.close()  # the server holds its own copy; its exit now ends the pipe
                _without_result_schema_check(client)
                yield client
        finally:
            errlog.close()

    def _stderr_pipe(self) -> Any:
        """A file for the server's stderr; a thread logs each line, and its end means the server exited.

        Read in chunks, never more than one line of :data:`_STDERR_LINE` bytes held: a server writing
        gigabytes without a newline must not grow the process. A longer line is logged cut, saying so,
        when it reaches that length; the rest of it is dropped.
        """
        read_fd, write_fd = os.pipe()
        loop, wake = asyncio.get_running_loop(), self._wake

        def pump() -> None:
            line, cut = bytearray(), False
            with os.fdopen(read_fd, "rb", buffering=0) as pipe:
                while chunk := pipe.read(_STDERR_CHUNK):
                    *ended, rest = chunk.split(b"\n")
                    for piece in ended:
                        if not cut:
                            self._stderr_line(bytes(line + piece))
                        line, cut = bytearray(), False
                    if not cut:
                        line += rest
                        if len(line) > _STDERR_LINE:
                            self._stderr_line(bytes(line[:_STDERR_LINE]), cut=True)
                            line, cut = bytearray(), True
                if line and not cut:
                    self._stderr_line(bytes(line))
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to tell
                loop.call_soon_threadsafe(wake.set)

        threading.Thread(target=pump, name=f"baf-mcp-{self.spec.name}-stderr", daemon=True).start()
        return os.fdopen(write_fd, "w")

    def _stderr_line(self, raw: bytes, cut: bool = False) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip()
        if cut:
            line += f" [line cut: longer than {_STDERR_LINE} bytes; the rest of it is dropped]"
        self._tail.append(line)
        self.logger.info("%s", line)

    @contextlib.asynccontextmanager
    async def _listening(self, client: Any) -> AsyncIterator[None]:
        """While inside: follow the server's tool-list changes over ``subscriptions/listen`` (2026 protocol;
        older servers send ``notifications/tools/list_changed``, see :meth:`_on_message`)."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        tools = client.server_capabilities.tools
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS or tools is None or not tools.list_changed:
            yield
            return
        task = asyncio.create_task(self._follow_changes(client))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _follow_changes(self, client: Any) -> None:
        wake = self._wake
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _ in subscription:
                    await self._relist()
        except Exception as exc:
            if not self._stopping:
                self.logger.info("MCP server %r: change subscription ended (%s)", self.spec.name, exc)
        # The subscription lives as long as the connection: its end means the connection ended.
        wake.set()

    async def _on_message(self, message: Any) -> None:
        """Older protocol versions announce list changes as a notification."""
        from mcp_types import ToolListChangedNotification

        root = getattr(message, "root", message)
        if isinstance(root, ToolListChangedNotification) and self._client is not None:
            await self._relist()

    async def _relist(self) -> None:
        """List the tools again after the server said its list changed, and hand the listing on.

        One listing at a time, and only a current one is handed on: two changes in quick succession
        (each announced) must not start two listings whose answers could arrive in either order, the
        older one last. A change announced while a listing is under way makes that listing stale: it is
        dropped and the tools are listed once more (however many changes came meanwhile).
        """
        self._changes += 1
        if self._relisting:
            return  # the listing under way sees the change and lists again
        self._relisting = True
        try:
            while (client := self._client) is not None:  # None: lost; the next connection lists them
                changes = self._changes
                try:
                    listing = await _list_tools(client)
                except Exception as exc:
                    self.logger.warning("MCP server %r: listing its tools again failed (%s)", self.spec.name, exc)
                    return
                if changes == self._changes and client is self._client:
                    self.on_listing(listing)
                    return
        finally:
            self._relisting = False

    # -- calls ----------------------------------------------------------------------------------

    async def call(self, mcp_name: str, arguments: dict[str, Any]) -> str:
        """Call tool ``mcp_name`` and return the text of its result.

        Raises:
            ToolError: the server answered with an error result (its text is the message) or an MCP error.
            ToolServerError: the server is not running, or stopped during the call.
        """
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED
        from pydantic import ValidationError

        client = await self._client_when_ready()
        try:
            result = await client.call_tool(mcp_name, arguments)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._lost(client)
                raise ToolServerError(
                    f"MCP server {self.spec.name!r} stopped during the call, which may or may not have taken "
                    "effect; the server is being restarted"
                ) from exc
            raise ToolError(f"MCP server {self.spec.name!r} refused the call: {exc}") from exc
        except ValidationError as exc:
            raise ToolError(
                f"MCP server {self.spec.name!r} answered with a malformed result ({exc.error_count()} problems)"
            ) from exc
        text = render_content(result.content, result.structured_content)
        if result.is_error:
            raise ToolError(text or f"tool '{mcp_name}' reported an error without a message")
        return text

    def _lost(self, client: Any) -> None:
        """A call found ``client``'s connection closed: no further call may use it; reconnect."""
        if self._client is client:
            self._client = None
            self._ready.clear()
        self._wake.set()

    async def _client_when_ready(self) -> Any:
        while self._client is None:
            if self._given_up is not None:
                raise ToolServerError(f"MCP server {self.spec.name!r} is not running: {self._given_up}")
            if self._stopping or self._task is None:
                raise ToolServerError(f"MCP server {self.spec.name!r} is not running (the agent is not started)")
            await self._ready.wait()  # a restart under way; the caller's timeout bounds the wait
            if self._client is None and not (self._stopping or self._given_up):
                await asyncio.sleep(0.01)
        return self._client

    def _stderr_note(self) -> str:
        lines = [line for line in self._tail if line.strip()]
        if not lines:
            return ""
        return "; its stderr ended with:\n  " + "\n  ".join(lines[-8:])


async def _list_tools(client: Any) -> Listing:
    """Every tool the server lists, page by page, each schema checked in a worker thread (a server's schemas
    can be large, and checking is pure Python work: the event loop keeps running meanwhile)."""
    from pydantic import ValidationError

    listing: list[tuple[str, str | None, Any]] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        try:
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        except ValidationError as exc:
            # The SDK checks the whole listing against the protocol's schema: one bad tool spoils it.
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
            raise ToolListingError(f"its tool list does not follow the MCP schema ({problems})") from None
        listing.extend((tool.name, tool.description, tool.input_schema) for tool in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return await asyncio.to_thread(checked_listing, listing)


def _without_result_schema_check(client: Any) -> None:
    """Turn off the SDK's check of each result against the tool's output schema.

    It runs ``jsonschema`` on the event loop with the server's regular expressions, which a server could
    write to take minutes (every session of the process would wait), and it gains baf nothing: the model
    reads a result's content whatever its shape (:func:`~baf.reasoning.mcp.content.render_content`).
    """

    async def accept(name: str, result: Any) -> None:
        return None

    client.session.validate_tool_result = accept


def _unwrapped(exc: BaseException) -> BaseException:
    """``exc`` out of the one-member groups task groups wrap it in."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _reason(exc: BaseException) -> str:
    """The innermost meaningful message of a start failure (task groups wrap them in groups)."""
    exc = _unwrapped(exc)
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in exc.exceptions)
    return str(exc) if isinstance(exc, ToolListingError) else f"{type(exc).__name__}: {exc}"
