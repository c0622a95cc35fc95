"""Toolsets: tools that come from outside the agent's code and live only while a runtime runs.

A :class:`Toolset` (an MCP server's tools, see :mod:`baf.reasoning.mcp`) is started when a runtime
starts and stopped when it stops; while started, its :attr:`~Toolset.tools` are offered to the model
next to the agent's own tools (``Agent.tools`` includes them) and called through the same tool-call
runner: recorded ahead, served from the log on resume and re-run, with the same timeouts and output caps.

Several runtimes may run one agent: a toolset counts its starts and stops (:func:`start_toolsets`,
:func:`stop_toolsets`), so the first start connects and the last stop disconnects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from baf.reasoning.tool import Tool

__all__ = ["Toolset", "start_toolsets", "stop_toolsets"]


@runtime_checkable
class Toolset(Protocol):
    """A named set of tools that exists while the toolset is started."""

    #: Unique among an agent's toolsets; used in log messages and error texts.
    name: str
    #: Every tool name of the toolset starts with it, and no other tool of the agent may (its namespace).
    prefix: str

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools offered now, by the name the model calls them by (empty while stopped)."""
        ...

    async def start(self) -> None:
        """Connect and list the tools. Raises ``ConfigurationError`` when that is impossible."""
        ...

    async def stop(self) -> None:
        """Disconnect; must not raise."""
        ...


async def start_toolsets(toolsets: Sequence[Toolset]) -> None:
    """Start each toolset in order; if one fails, stop those already started and raise its error."""
    started: list[Toolset] = []
    try:
        for toolset in toolsets:
            await toolset.start()
            started.append(toolset)
    except BaseException:
        await stop_toolsets(started)
        raise


async def stop_toolsets(toolsets: Sequence[Toolset]) -> None:
    """Stop each toolset, in reverse order of starting."""
    for toolset in reversed(list(toolsets)):
        await toolset.stop()
