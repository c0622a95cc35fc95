"""A small MCP server with three calculator tools, written with the mcp SDK's server side.

baf starts it as a subprocess (see ``calculator_agent.py``) and talks to it over stdin/stdout. Run it on
its own with ``python calculator_server.py`` (it then waits for an MCP client on stdin), or over HTTP
with ``python calculator_server.py --http 8000`` (endpoint ``http://127.0.0.1:8000/mcp``).
"""

from __future__ import annotations

import sys

from baf.errors import MissingExtraError

try:  # without the extra, say which one to install (in one line: see MissingExtraError)
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError as exc:
    raise MissingExtraError("The calculator's MCP server (the mcp SDK)", "mcp") from exc

server = MCPServer("calculator", instructions="Exact arithmetic on decimal numbers.")


@server.tool()
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@server.tool()
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


@server.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    if b == 0:
        # A ToolError's message reaches the client, in a result marked isError; other exceptions are
        # reported without their message.
        raise ToolError("division by zero")
    return a / b


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
