"""The observable steps of a reasoning loop, as streamed to platforms and recorded in the log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ReasoningStep", "ReasoningStepKind", "build_step"]


class ReasoningStepKind:
    """The kinds of :class:`ReasoningStep`.

    ``REASONING_STARTED`` and ``REASONING_FINISHED`` bracket every invocation of a reasoning body, so a
    UI can open a live trace group on the first and close it on the second.
    """

    REASONING_STARTED = "reasoning_started"
    REASONING_FINISHED = "reasoning_finished"
    LLM_TEXT = "llm_text"
    LLM_TOOL_CALLS = "llm_tool_calls"
    TOOL_RESULT = "tool_result"
    TASK_ADDED = "task_added"
    TASK_COMPLETED = "task_completed"
    TASK_SKIPPED = "task_skipped"
    PUSHBACK = "pushback"
    MAX_STEPS = "max_steps"
    #: Older messages were dropped or summarised to stay under the token limit.
    COMPACTION = "compaction"
    #: The token or cost budget ended the invocation.
    BUDGET_SPENT = "budget_spent"
    #: A final answer that did not fit ``output_type`` went back to the model once.
    OUTPUT_INVALID = "output_invalid"
    #: The output reviewer's verdict on a final answer.
    REVIEW = "review"
    # Written by the reasoning patterns (baf.reasoning.patterns), alongside LLM_TEXT for their answers.
    THOUGHT = "thought"
    ACTION = "action"
    OBSERVATION = "observation"
    REFLECTION = "reflection"
    PLAN = "plan"


@dataclass(frozen=True, slots=True)
class ReasoningStep:
    """One event of the loop: a shared envelope with kind-specific ``details``.

    ``step`` is the loop iteration (0-based) the event belongs to; ``summary`` is one line a UI can show
    as is. New kinds only add new ``details`` shapes, so consumers never break.
    """

    kind: str
    step: int
    summary: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used on the wire and in ``reasoning_step`` records."""
        return {"kind": self.kind, "step": self.step, "summary": self.summary, "details": self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReasoningStep:
        """Inverse of :meth:`to_dict`."""
        return cls(data["kind"], int(data["step"]), str(data["summary"]), dict(data.get("details") or {}))


# The slot descriptors the frozen ``__init__`` writes through ``object.__setattr__(self, name, value)``,
# bound once (as ``baf.log.record.build_record`` does for records).
_new = object.__new__
_set_kind = ReasoningStep.__dict__["kind"].__set__
_set_step = ReasoningStep.__dict__["step"].__set__
_set_summary = ReasoningStep.__dict__["summary"].__set__
_set_details = ReasoningStep.__dict__["details"].__set__


def build_step(kind: str, step: int, summary: str, details: dict[str, Any]) -> ReasoningStep:
    """``ReasoningStep(kind, step, summary, details)`` at two thirds of the cost, every field required.

    For the loops, which build two or three steps a model turn: a step built through the frozen
    dataclass's generated ``__init__`` takes ~8,400 instructions, through its slots ~5,600
    (``bench/ab_instructions.py``). The result is an ordinary ``ReasoningStep``, equal to the one
    ``__init__`` makes.
    """
    built = _new(ReasoningStep)
    _set_kind(built, kind)
    _set_step(built, step)
    _set_summary(built, summary)
    _set_details(built, details)
    return built
