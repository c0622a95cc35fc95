"""MCP servers the MCP tests run as subprocesses, written with the mcp SDK's server side.

``python mcp_servers.py KIND [PORT]`` serves one of them over stdio, or over streamable HTTP on
loopback when a port is given:

- ``calc``: ``add``, ``fail`` (an ``isError`` result), ``die`` (exits mid-call), ``exit_soon`` (exits
  after answering), ``hang`` (never answers), ``big`` (a 10 MB result), ``grow`` (adds a tool and
  announces the changed list), ``whoami`` (the Authorization header it received); with
  ``BAF_TEST_STARTS`` set, each process start appends its pid to that file;
- ``calc_legacy``: ``calc`` serving only the 2025 protocol's ``initialize`` handshake (no
  ``server/discover``, no ``subscriptions/listen``), so ``grow`` announces its list with
  ``notifications/tools/list_changed``;
- ``not_object``: ``ok`` and ``bad``, whose input schema is not an object schema;
- ``bad_schema``: ``ok`` and ``bad``, whose object schema is not a valid JSON Schema;
- ``duplicate``: two tools named ``twin``, and ``single``;
- ``hostile``: ``ok``; ``redos``, whose input and output schemas hold the pattern ``^(a|aa)+$`` (slow to
  fail against many ``a`` and a ``b``), answering with its argument as structured content; and
  tools whose schemas baf must refuse: ``missing_ref`` (a ``$ref`` to nothing), ``self_ref`` (``$ref: "#"``
  beside ``type``), ``remote_ref`` (a ``$ref`` to a URL), ``deep`` (nested 80 levels), ``huge`` (an
  ``enum`` of 30 000 values);
- ``relist_race`` (2025 protocol): ``change_twice`` changes the tool list twice (``v1`` then ``v2``, each
  announced), the second change made once the first listing was asked for; that listing of ``v1`` is
  answered a second late, after any listing of ``v2``. Each answered listing's version is appended to
  the file ``BAF_TEST_LISTINGS`` names;
- ``flood``: ``calc``, after writing 5 MB to stderr without a newline, then ``after the flood``;
- ``silent``: exits at once, writing a reason to stderr;
- ``mute``: never answers the handshake.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.mcpserver import Context, MCPServer


def calc(legacy: bool = False) -> MCPServer:
    app = MCPServer("calc")
    starts = os.environ.get("BAF_TEST_STARTS")
    if starts:
        with open(starts, "a", encoding="utf-8") as file:
            file.write(f"{os.getpid()}\n")

    @app.tool()
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    @app.tool()
    def fail(reason: str) -> str:
        """Fail with the given reason."""
        raise ValueError(reason)

    @app.tool()
    def die() -> str:
        """Exit the server process in the middle of the call."""
        print("dying on purpose", file=sys.stderr, flush=True)
        os._exit(3)

    @app.tool()
    def exit_soon() -> str:
        """Answer, then exit the server process a moment later."""
        import threading

        threading.Timer(0.2, lambda: os._exit(4)).start()
        return "exiting"

    @app.tool()
    async def hang() -> str:
        """Never answer."""
        await asyncio.sleep(3600)
        return "late"

    @app.tool()
    def big() -> str:
        """Return 10 MB of text."""
        return "x" * (10 * 1024 * 1024)

    @app.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool named 'extra' and tell the client the list changed."""

        def extra() -> str:
            """A tool that appeared later."""
            return "extra!"

        app.add_tool(extra)
        if legacy:  # the 2025 protocol's notification (notify_tools_changed reaches subscriptions/listen only)
            await ctx.session.send_tool_list_changed()
        else:
            await ctx.notify_tools_changed()
        return "grown"

    @app.tool()
    def whoami(ctx: Context) -> str:
        """The Authorization header of the HTTP request ('stdio' over stdio)."""
        request = ctx.request_context.request
        return "stdio" if request is None else str(request.headers.get("authorization"))

    return app


async def serve_handshake_only(server: Server[Any]) -> None:
    """Serve ``server`` over stdio in the handshake era only, as servers before the 2026 protocol do (the
    SDK's own loop for that era, which its streamable HTTP transport uses)."""
    from mcp.server.runner import serve_loop
    from mcp.server.stdio import stdio_server

    async with server.lifespan(server) as state, stdio_server() as (read, write):
        await serve_loop(server, read, write, lifespan_state=state, init_options=server.create_initialization_options())


def listing_server(name: str, tools: list[types.Tool]) -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        structured = {"s": (params.arguments or {}).get("s")} if params.name == "redos" else None
        return types.CallToolResult(content=[types.TextContent(text=f"{params.name} ran")],
                                    structured_content=structured)  # fmt: skip

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)


OBJECT = {"type": "object", "properties": {}}
SLOW = "^(a|aa)+$"


def hostile_tools() -> list[types.Tool]:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(40):  # 80 levels of JSON: the SDK reads no message nested 200 deep
        deep = {"type": "object", "properties": {"a": deep}}
    slow = {"type": "object", "properties": {"s": {"type": "string", "pattern": SLOW}}}
    schemas: dict[str, dict[str, Any]] = {
        "ok": OBJECT,
        "missing_ref": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}},
        "self_ref": {"type": "object", "$ref": "#"},
        "remote_ref": {"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/schema.json"}}},
        "deep": deep,
        "huge": {"type": "object", "properties": {"a": {"enum": list(range(30_000))}}},
    }
    tools = [types.Tool(name=name, input_schema=schema) for name, schema in schemas.items()]
    return [*tools, types.Tool(name="redos", input_schema=slow, output_schema=slow)]


def note_listing(version: int) -> None:
    with open(os.environ["BAF_TEST_LISTINGS"], "a", encoding="utf-8") as file:
        file.write(f"{version}\n")


def relist_race_server() -> Server[Any]:
    version = [0]
    first_listing_asked = asyncio.Event()

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        seen = version[0]
        if seen == 1:
            first_listing_asked.set()
            await asyncio.sleep(1.0)  # an older listing, answered after a newer one
        note_listing(seen)
        return types.ListToolsResult(tools=[types.Tool(name="change_twice", input_schema=OBJECT),
                                            types.Tool(name=f"v{seen}", input_schema=OBJECT)])  # fmt: skip

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "change_twice":
            version[0] = 1
            await ctx.session.send_tool_list_changed()
            await asyncio.wait_for(first_listing_asked.wait(), 10)
            version[0] = 2
            await ctx.session.send_tool_list_changed()
        return types.CallToolResult(content=[types.TextContent(text=f"{params.name} ran")])

    return Server("relist_race", on_list_tools=list_tools, on_call_tool=call_tool)


def main() -> None:
    kind = sys.argv[1]
    if kind == "silent":
        print("cannot start: no configuration found", file=sys.stderr, flush=True)
        sys.exit(2)
    if kind == "mute":
        time.sleep(3600)
        return
    if kind == "relist_race":
        asyncio.run(serve_handshake_only(relist_race_server()))
        return
    if kind == "flood":
        for _ in range(5):
            sys.stderr.buffer.write(b"x" * (1024 * 1024))
        sys.stderr.buffer.write(b"\nafter the flood\n")
        sys.stderr.flush()
        calc().run("stdio")
        return
    if kind in ("calc", "calc_legacy"):
        app = calc(legacy=kind == "calc_legacy")
        if kind == "calc_legacy":
            asyncio.run(serve_handshake_only(app._lowlevel_server))
            return
        if len(sys.argv) > 2:
            app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
        else:
            app.run("stdio")
        return
    if kind == "not_object":
        tools = [types.Tool(name="ok", input_schema=OBJECT),
                 types.Tool.model_construct(name="bad", input_schema={"type": "string"})]  # fmt: skip
    elif kind == "bad_schema":
        broken = {"type": "object", "properties": {"a": {"type": "whole number"}}}
        tools = [types.Tool(name="ok", input_schema=OBJECT), types.Tool(name="bad", input_schema=broken)]
    elif kind == "hostile":
        tools = hostile_tools()
    elif kind == "duplicate":
        tools = [types.Tool(name="twin", input_schema=OBJECT), types.Tool(name="twin", description="other",
                 input_schema=OBJECT), types.Tool(name="single", input_schema=OBJECT)]  # fmt: skip
    else:
        raise SystemExit(f"unknown server kind {kind!r}")
    if kind == "not_object":
        # The SDK checks a result against the protocol's schema before sending it, so its servers cannot
        # list a non-object input schema; servers built otherwise can. This one skips the check.
        from mcp.server import runner

        runner._methods.serialize_server_result = lambda method, version, data, **_: dict(data)  # type: ignore[assignment]
    server = listing_server(kind, tools)

    async def serve() -> None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    asyncio.run(serve())


if __name__ == "__main__":
    main()
