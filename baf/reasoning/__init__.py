"""The user-facing primitives of reasoning states: tools the model calls, skills it is taught, and
workspaces (folders) it may browse.

The ``@tool`` decorator lives at :func:`baf.reasoning.tool.tool`; it is not re-exported here because the
name would shadow the ``baf.reasoning.tool`` module (``baf.reasoning.tool.Tool`` must keep working).
"""

from baf.reasoning.skill import Skill
from baf.reasoning.tool import Tool
from baf.reasoning.workspace import Workspace, WorkspaceEntry, workspace_tools

__all__ = ["Skill", "Tool", "Workspace", "WorkspaceEntry", "workspace_tools"]
