"""The tools of one MCP server, as a :class:`~baf.reasoning.toolset.Toolset` of an agent.

``agent.add_mcp_server("fs", command=[...])`` makes one. When a runtime starts, the server is started
(stdio) or reached (HTTP) and its tools are listed; each becomes an :class:`~baf.reasoning.mcp.tool.MCPTool`
named ``fs__<tool>`` (see :mod:`baf.reasoning.mcp.names`) with the server's input schema as it is. They
are listed again when the server says its list changed, and after a restart. When the runtime stops,
the connection is closed (a stdio server is told to exit).

A deterministic re-run (``baf replay --rerun``) starts no server: the tools are rebuilt from the schemas
the recorded requests offered the model, and every result comes from the log.
"""

from __future__ import annotations

import importlib.util
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from baf.errors import ConfigurationError, MissingExtraError, ToolServerError
from baf.log.redaction import register_header_secrets
from baf.reasoning.effects import ReplayGuardError, offline_tool_schemas
from baf.reasoning.mcp.connection import Listing, MCPConnection, ServerSpec
from baf.reasoning.mcp.names import ListedTool, default_prefix, model_name, select_tools
from baf.reasoning.mcp.tool import MCPTool

__all__ = ["MCPToolset"]

_SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


class MCPToolset:
    """The tools of MCP server ``name``, offered to the model while a runtime runs.

    Args:
        name: The server's name in this agent (letters, digits, ``_``, ``-``); the default prefix of its
            tool names is ``name__``.
        command: The command that starts a stdio server, as a list (``["python", "server.py"]``).
        url: The endpoint of a streamable-HTTP server (``http://host:port/mcp``) instead of a command.
        headers: HTTP headers sent with every request to ``url`` (an ``Authorization`` token, ...). The values
            of credential headers (``Authorization``, ``Proxy-Authorization``, ``Cookie``, and names holding
            ``key``, ``token``, ``secret`` or ``auth``, in any case) are redacted from every session log.
        tools: The server's tool names to offer (by their MCP names); ``None`` for all. A name the
            server does not list, or lists in a form baf cannot use, stops the start with an error.
        prefix: What the model's name of each tool starts with, instead of ``name__``.
        timeout: Seconds each call may take; ``None`` leaves it to the reasoning state's ``tool_timeout``.
        env: Environment variables for a stdio server, over a minimal inherited set (``PATH``, ``HOME``...).
        cwd: Working directory of a stdio server.
        start_timeout: Seconds the server has to start and list its tools.
        max_restarts: How many times a server that died is started again per runtime start.
        requires_approval: Each call of the server's tools waits for a human decision before it runs
            (``docs/human_approval.md``).

    Raises:
        ConfigurationError: anything above out of its range, or the ``mcp`` extra not installed.
    """

    def __init__(
        self,
        name: str,
        command: Sequence[str] | None = None,
        *,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        tools: Iterable[str] | None = None,
        prefix: str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        start_timeout: float = 30.0,
        max_restarts: int = 3,
        requires_approval: bool = False,
    ) -> None:
        if not isinstance(name, str) or not _SERVER_NAME_RE.match(name):
            raise ConfigurationError(f"MCP server name {name!r} must match ^[A-Za-z0-9_-]{{1,40}}$")
        where = f"MCP server {name!r}"
        if not isinstance(requires_approval, bool):
            raise ConfigurationError(f"{where}: requires_approval must be True or False")
        if (command is None) == (url is None):
            raise ConfigurationError(f"{where}: give either command=[...] (stdio) or url=... (HTTP), not both")
        if command is not None:
            if isinstance(command, str) or not command or not all(isinstance(c, str) and c for c in command):
                raise ConfigurationError(f"{where}: command must be a non-empty list of strings, got {command!r}")
        if url is not None:
            parts = urlsplit(url) if isinstance(url, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigurationError(f"{where}: url must be an http:// or https:// URL, got {url!r}")
        if headers and url is None:
            raise ConfigurationError(f"{where}: headers are for an HTTP server (url=...)")
        resolved_prefix = default_prefix(name) if prefix is None else prefix
        if not isinstance(resolved_prefix, str) or not re.match(r"^[A-Za-z0-9_-]{1,40}$", resolved_prefix):
            raise ConfigurationError(f"{where}: prefix must match ^[A-Za-z0-9_-]{{1,40}}$, got {resolved_prefix!r}")
        if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
            raise ConfigurationError(f"{where}: timeout must be a positive number of seconds")
        if not start_timeout > 0:
            raise ConfigurationError(f"{where}: start_timeout must be a positive number of seconds")
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
            raise ConfigurationError(f"{where}: max_restarts must be a whole number, 0 or more")
        if importlib.util.find_spec("mcp") is None:
            raise MissingExtraError(f"{where}: MCP tools", "mcp")
        self.name = name
        self.prefix = resolved_prefix
        self.wanted: tuple[str, ...] | None = tuple(tools) if tools is not None else None
        self.timeout = timeout
        self.requires_approval = requires_approval
        register_header_secrets(headers or {})  # never written to a session log (docs/mcp.md)
        self.spec = ServerSpec(name, tuple(command) if command is not None else None, url, dict(headers or {}),
                               dict(env) if env is not None else None, cwd, start_timeout, max_restarts)  # fmt: skip
        self.logger = logging.getLogger(f"baf.mcp.{name}")
        self._tools: dict[str, MCPTool] = {}
        self._connection: MCPConnection | None = None
        self._starts = 0
        self._offline = False

    def __repr__(self) -> str:
        return f"MCPToolset({self.name!r}, {self.spec.describe()!r}, tools={list(self._tools)!r})"

    @property
    def tools(self) -> Mapping[str, MCPTool]:
        """The server's tools offered now, by the name the model calls them by (empty while stopped)."""
        return MappingProxyType(self._tools)

    @property
    def connection(self) -> MCPConnection | None:
        """The live connection while started (``None`` while stopped, and during a re-run)."""
        return self._connection

    async def start(self) -> None:
        """Start (or reach) the server and list its tools; in a re-run, take them from the log instead.

        Raises:
            ConfigurationError: the server could not be started, or a tool named in ``tools`` is missing
                or unusable.
        """
        self._starts += 1
        if self._starts > 1:
            return  # another runtime of the agent started it already
        try:
            recorded = offline_tool_schemas()
            if recorded is not None:
                self._offline = True
                self._tools = self._tools_from_log(recorded)
                return
            self._offline = False
            self._connection = MCPConnection(self.spec, self._listing_changed)
            self._apply(await self._connection.start(), strict=True)
        except BaseException:
            self._starts -= 1
            connection, self._connection = self._connection, None
            if connection is not None:
                await connection.stop()
            raise

    async def stop(self) -> None:
        """Close the connection once the last runtime that started it stops."""
        if self._starts == 0:
            return
        self._starts -= 1
        if self._starts > 0:
            return
        connection, self._connection = self._connection, None
        self._tools = {}
        if connection is not None:
            await connection.stop()

    # -- listings -------------------------------------------------------------------------------

    def _listing_changed(self, listing: Listing) -> None:
        self._apply(listing, strict=False)
        self.logger.info("MCP server %r: tools now %s", self.name, ", ".join(self._tools) or "none")

    def _apply(self, listing: Listing, strict: bool) -> None:
        """Offer the usable tools of ``listing``. With ``strict`` (at start) a wanted tool that is missing
        or unusable is a ``ConfigurationError``; later (a changed list) it is a warning."""
        selection = select_tools(listing, self.prefix, self.wanted)
        problems = [f"{r.mcp_name!r}: {r.reason}" for r in selection.refused]
        if self.wanted is not None:
            listed = {entry[0] for entry in listing}
            problems += [f"{w!r}: the server does not list it" for w in self.wanted if w not in listed]
        if problems and strict and self.wanted is not None:
            raise ConfigurationError(
                f"MCP server {self.name!r}: tools asked for cannot be offered:\n- " + "\n- ".join(problems)
            )
        for problem in problems:
            self.logger.warning("MCP server %r: tool %s; not offered to the model", self.name, problem)
        self._tools = {
            t.name: MCPTool(t, self.name, self._call, self.timeout, self.requires_approval) for t in selection.tools
        }

    def _tools_from_log(self, schemas: list[dict[str, Any]]) -> dict[str, MCPTool]:
        """The server's tools as a recorded session offered them (a re-run connects nothing)."""
        wanted = {model_name(self.prefix, w) for w in self.wanted} if self.wanted is not None else None
        tools: dict[str, MCPTool] = {}
        for schema in schemas:
            function = schema.get("function") or {}
            name = str(function.get("name", ""))
            if not name.startswith(self.prefix) or (wanted is not None and name not in wanted):
                continue
            listed = ListedTool(name[len(self.prefix):], name, str(function.get("description") or ""),
                                dict(function.get("parameters") or {"type": "object"}))  # fmt: skip
            tools[name] = MCPTool(listed, self.name, self._call, self.timeout, self.requires_approval)
        return tools

    async def _call(self, mcp_name: str, arguments: dict[str, Any]) -> str:
        if self._offline:
            raise ReplayGuardError(f"re-run guard: MCP server {self.name!r} is not started in a re-run "
                                   f"(tool {mcp_name!r} needed a result the log does not hold)")  # fmt: skip
        connection = self._connection
        if connection is None:
            raise ToolServerError(f"MCP server {self.name!r} is not running (the agent is not started)")
        return await connection.call(mcp_name, arguments)
