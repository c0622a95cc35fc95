"""Predefined states. Import them from their modules, e.g.
``from baf.library.state.reasoning_state_library import new_reasoning_state``."""
