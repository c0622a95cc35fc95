"""One tool of an MCP server, as a baf :class:`~baf.reasoning.tool.Tool`.

It is called like any tool, through the same tool-call runner: the arguments are checked against the
server's own input schema (the schema the model was shown), the call is recorded ahead, a resumed or
re-run session is served from the log, and the runner's timeout and output cap apply. A result the
server marks ``isError`` is a :class:`~baf.errors.ToolError`: the model reads it as a failed call.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from baf.reasoning.mcp.names import ListedTool
from baf.reasoning.mcp.schema import CheckAbandoned, bounded_errors, bounded_validator
from baf.reasoning.tool import Tool
from baf.reasoning.tool_arguments import argument_error, argument_path, not_an_object, parse_arguments

__all__ = ["MCPTool", "SchemaArguments"]

#: Calls the server: ``(mcp_name, arguments) -> text``; raises ``ToolError`` for an error result.
Caller = Callable[[str, dict[str, Any]], Awaitable[str]]

#: Problems listed for one call; a huge wrong payload would otherwise give the model a wall of text.
_MAX_PROBLEMS = 20

logger = logging.getLogger("baf.mcp")


class SchemaArguments:
    """The arguments check of a tool whose schema is a JSON Schema from elsewhere (an MCP server's input
    schema): the model is shown that schema as it is, and arguments are checked against it as JSON Schema
    (with the ``jsonschema`` package the MCP client depends on), after the same JSON parsing as any tool.

    The check is bounded (:mod:`baf.reasoning.mcp.schema`): the server's regular expressions are not run,
    and a check that would take too long is abandoned, the arguments then going to the server unchecked.

    Args:
        tool_name: Used in error messages.
        schema: The JSON Schema of the arguments object.
    """

    def __init__(self, tool_name: str, schema: dict[str, Any]) -> None:
        self.tool_name = tool_name
        self._schema = schema
        self._validator: Any = None

    @property
    def json_schema(self) -> dict[str, Any]:
        """The schema, as given."""
        return self._schema

    def validate(self, raw: str | bytes | bytearray | Mapping[str, Any]) -> dict[str, Any]:
        """Parse the model's arguments and check them against the schema.

        Raises:
            ToolArgumentError: not JSON, not an object, or not valid under the schema: every problem
                (up to 20), each naming the argument, worded for the model to fix its call.
        """
        args = parse_arguments(self.tool_name, raw) if isinstance(raw, str | bytes | bytearray) else raw
        if not isinstance(args, Mapping):
            raise not_an_object(self.tool_name, args)
        args = dict(args)
        try:
            errors = bounded_errors(self._checker(), args)
        except CheckAbandoned as exc:
            logger.warning("tool %r: %s; the arguments go to the server unchecked", self.tool_name, exc)
            return args
        errors.sort(key=lambda error: [*map(str, error.absolute_path)])
        if errors:
            problems = [_describe(error) for error in errors[:_MAX_PROBLEMS]]
            if len(errors) > _MAX_PROBLEMS:
                problems.append(f"... and {len(errors) - _MAX_PROBLEMS} more")
            raise argument_error(self.tool_name, problems)
        return args

    def _checker(self) -> Any:
        if self._validator is None:
            self._validator = bounded_validator(self._schema)
        return self._validator


def _describe(error: Any) -> str:
    message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
    path = list(error.absolute_path)
    return f"argument '{argument_path(path)}': {message}" if path else message


class MCPTool(Tool):
    """A tool the model calls by :attr:`name`, run by MCP server :attr:`server` as :attr:`mcp_name`.

    Args:
        listed: The tool as the server listed it (names, description, input schema).
        server: The name the server was added under (``agent.add_mcp_server(name, ...)``).
        caller: What runs a call (the server connection, or the re-run guard).
        timeout: Seconds a call may take; ``None`` leaves it to the reasoning state's ``tool_timeout``.
        requires_approval: Each call waits for a human decision (``docs/human_approval.md``).
    """

    def __init__(
        self,
        listed: ListedTool,
        server: str,
        caller: Caller,
        timeout: float | None = None,
        requires_approval: bool = False,
    ) -> None:
        # idempotent=False: nothing says a remote tool is; a crash mid-call is reported, not repeated.
        super().__init__(caller, name=listed.name, description=listed.description, timeout=timeout,
                         requires_approval=requires_approval,
                         arguments=SchemaArguments(listed.name, listed.input_schema))  # fmt: skip
        self.server = server
        self.mcp_name = listed.mcp_name

    def __repr__(self) -> str:
        return f"MCPTool(name={self.name!r}, server={self.server!r}, mcp_name={self.mcp_name!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the tool on the server with keyword arguments (a coroutine): ``await tool(a=1)``."""
        if args:
            raise TypeError(f"MCP tool {self.name!r} takes keyword arguments only")
        return self.fn(self.mcp_name, dict(kwargs))

    async def call(self, args: Mapping[str, Any], session: Any = None) -> Any:
        """Run the call on the server and return the text the model reads.

        Raises:
            ToolError: the server answered with an error result, an MCP error, or is not reachable
                (:class:`~baf.errors.ToolServerError`).
            ToolTimeoutError: the call ran past ``timeout`` (the request is cancelled on the server).
        """
        call = self.fn(self.mcp_name, copy.deepcopy(dict(args)))
        if self.timeout is None:
            return await call
        return await self._within_timeout(call, self.timeout)

    @staticmethod
    def render_result(value: Any) -> str:
        """The text of a call (already text), or JSON for anything else."""
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
