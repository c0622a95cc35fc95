"""YAML agents: an agent described in a file, built through baf's Python API (``baf run agent.yaml``).

- :func:`load_agent` builds the :class:`~baf.core.agent.Agent` of a file; problems are reported as one
  :class:`~baf.errors.AgentFileError` naming file, line and column.
- :func:`agent_schema` is the JSON schema of the file (``baf schema``), generated from the same pydantic
  models that validate it; ``docs/yaml_reference.md`` is generated from them too.
"""

from __future__ import annotations

from typing import Any

from baf.declarative.build import build_agent, load_agent, parse_agent_file
from baf.declarative.models import AgentFile

__all__ = ["AgentFile", "agent_schema", "build_agent", "load_agent", "parse_agent_file"]


def agent_schema() -> dict[str, Any]:
    """The JSON schema of an agent file, for editors (``baf schema > agent.schema.json``)."""
    schema = AgentFile.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "baf agent"
    return schema
