"""Tools from MCP servers (the ``mcp`` extra: ``pip install -e ".[mcp]"`` in a clone of baf).

``agent.add_mcp_server(name, command=[...])`` or ``agent.add_mcp_server(name, url="http://.../mcp")``
adds an :class:`MCPToolset`: the server's tools, listed when the runtime starts, offered to the model
as ``name__tool`` with the server's own schemas, and called through the same tool-call runner as any
tool. See ``docs/mcp.md``.

The ``mcp`` package is imported only when a server is connected, so this module imports without it.
"""

from baf.reasoning.mcp.connection import MCPConnection, ServerSpec
from baf.reasoning.mcp.names import model_name
from baf.reasoning.mcp.tool import MCPTool
from baf.reasoning.mcp.toolset import MCPToolset

__all__ = ["MCPConnection", "MCPTool", "MCPToolset", "ServerSpec", "model_name"]
