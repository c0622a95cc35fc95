"""Predefined building blocks composed from core, reasoning and llm: states, tools, demos."""
