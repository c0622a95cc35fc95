"""ReasoningPipeline: patterns in sequence, each one's output the next one's input. Itself a pattern."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from baf.errors import ConfigurationError
from baf.reasoning.patterns.base import BasePattern, ReasoningPattern
from baf.reasoning.patterns.result import StopReason
from baf.reasoning.patterns.run import PatternRun
from baf.reasoning.patterns.steps import PatternStepKind

__all__ = ["ReasoningPipeline"]


class ReasoningPipeline(BasePattern[Any]):
    """Run ``patterns`` one after the other; the text of each output (``as_text``) feeds the next.

    The pipeline's output is the last stage's output; its trace and usage cover every stage. A stage
    that does not succeed ends the pipeline with ``success=False`` (``stop_reason="step_failed"``, or the
    stage's guard) and that stage's output as the partial result. Costs the sum of its stages.
    """

    default_name = "pipeline"

    def __init__(self, patterns: Sequence[ReasoningPattern[Any]], **options: Any) -> None:
        options.setdefault("max_steps", max(len(patterns), 1))
        super().__init__(**options)
        if not patterns:
            raise ConfigurationError("a pipeline needs at least one pattern")
        self.patterns = list(patterns)

    async def run(self, run: PatternRun) -> Any:
        current: Any = run.input
        output: Any = None
        for index, pattern in enumerate(self.patterns, 1):
            run.begin_step()
            run.emit(PatternStepKind.PLAN, f"stage {index}/{len(self.patterns)}: {pattern.name}",
                     stage=index, stage_pattern=pattern.name)  # fmt: skip
            result = await run.delegate(pattern, current)
            output = run.partial = result.output
            if not result.success:
                run.failure = (
                    result.stop_reason if result.stop_reason != StopReason.COMPLETED else StopReason.STEP_FAILED
                )
                run.emit(PatternStepKind.OBSERVATION, f"stage {index} ({pattern.name}) did not succeed: "
                         f"{result.stop_reason}", stage=index, stop_reason=result.stop_reason)  # fmt: skip
                return output
            current = result.text
        return output
