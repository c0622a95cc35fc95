"""Test helpers shipped with baf: test models, a recording platform, and contract test kits.

Nothing here reaches a real model or the network.
"""

from baf.testing.llms import FunctionLLM, ScriptedLLM
from baf.testing.recording import RecordingPlatform

__all__ = ["FunctionLLM", "RecordingPlatform", "ScriptedLLM"]
