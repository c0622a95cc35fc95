"""The output reviewer: validate a pattern's final output against a model, retrying through the LLM."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pydantic

__all__ = ["OutputReviewer"]


@dataclass(frozen=True, slots=True)
class OutputReviewer:
    """Checks a pattern's final output and asks the model to fix it when it does not pass.

    The output passes when it is (or its text parses into) an ``output_type`` instance and ``check``,
    if given, returns ``None`` for it; ``check`` returns a problem description otherwise. A failing
    output is sent back to the model with the problems, up to ``max_retries`` times (one model call
    each). When every retry fails, the run ends with ``success=False`` and
    ``stop_reason="review_failed"``, keeping the unreviewed output: the reviewer never invents one.
    """

    output_type: type[pydantic.BaseModel]
    max_retries: int = 2
    check: Callable[[Any], str | None] | None = None

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries cannot be negative, got {self.max_retries}")

    def problem(self, output: Any) -> str | None:
        """Why ``output`` (already an ``output_type`` instance) fails ``check``, or ``None``."""
        return self.check(output) if self.check is not None else None
