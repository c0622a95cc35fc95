"""``ReasoningResult[T]``: what every pattern run returns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pydantic

from baf.llm.base import Usage
from baf.reasoning.patterns.accounting import CallUsage
from baf.reasoning.patterns.steps import PatternStep

__all__ = ["ReasoningResult", "StopReason", "as_text"]

T = TypeVar("T")


class StopReason:
    """Why a run ended (``ReasoningResult.stop_reason``)."""

    COMPLETED = "completed"
    MAX_STEPS = "max_steps"
    TIMEOUT = "timeout"
    BUDGET = "budget"
    NOT_APPROVED = "not_approved"  # a critic never approved (Reflexion)
    STEP_FAILED = "step_failed"  # a plan or pipeline stage failed
    REVIEW_FAILED = "review_failed"  # the output reviewer rejected the output after its retries


@dataclass(slots=True)
class ReasoningResult(Generic[T]):
    """The outcome of one pattern run.

    ``output`` is the pattern's typed output; after a guard stopped the run it is the best partial
    output there was (or ``None``), ``success`` is False and ``error`` holds the guard's typed error.
    ``usage`` is the total over ``calls``; ``cost`` comes from the pattern's price table.
    """

    pattern: str
    output: T | None
    success: bool
    steps_taken: int
    trace: list[PatternStep] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    calls: list[CallUsage] = field(default_factory=list)
    stop_reason: str = StopReason.COMPLETED
    error: BaseException | None = None

    @property
    def text(self) -> str:
        """The output as text (see :func:`as_text`): what a pipeline hands to its next pattern."""
        return as_text(self.output)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready digest (no trace) for session variables and logs."""
        return {
            "pattern": self.pattern,
            "success": self.success,
            "stop_reason": self.stop_reason,
            "steps_taken": self.steps_taken,
            "output": _jsonable(self.output),
            "usage": self.usage.to_dict(),
            "cost": self.cost,
            "error": f"{type(self.error).__name__}: {self.error}" if self.error is not None else None,
        }


def as_text(output: object) -> str:
    """The text form of a pattern's output.

    A string is itself; a pydantic model or dict with an ``answer`` field is that answer (the outputs of
    the built-in patterns all have one); ``None`` is empty; anything else is JSON.
    """
    if output is None:
        return ""
    if isinstance(output, str):
        return output
    answer = output.get("answer") if isinstance(output, dict) else getattr(output, "answer", None)
    if isinstance(answer, str):
        return answer
    return json.dumps(_jsonable(output), ensure_ascii=False)


def _jsonable(value: object) -> Any:
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)
