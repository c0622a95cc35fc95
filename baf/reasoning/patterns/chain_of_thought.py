"""Chain of Thought: structured thoughts, one per step, each building on the ones before, until one is final."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from baf.errors import ConfigurationError
from baf.reasoning.patterns.base import BasePattern
from baf.reasoning.patterns.models import ChainOfThoughtOutput, FewShotExample, Thought
from baf.reasoning.patterns.run import PatternRun
from baf.reasoning.patterns.steps import PatternStepKind

__all__ = ["THINKING_FORMATS", "ChainOfThought"]

#: How each thinking format asks the model to think.
THINKING_FORMATS: dict[str, str] = {
    "step_by_step": "Work through the problem one small, checkable step at a time.",
    "pros_cons": "Weigh the options: for each, give the arguments for and against, then decide.",
    "first_principles": "Reduce the problem to basic facts you are sure of, and build the answer up from them.",
}

_STEP = (
    "Problem: {problem}\n\n{format_instructions}\n{examples}\n"
    "Your reasoning so far:\n{previous}\n\n"
    "Give your next reasoning step (step {step_number}). When you can answer, set is_final to true and "
    "put the answer in final_answer."
)


class ChainOfThought(BasePattern[ChainOfThoughtOutput]):
    """Step-by-step reasoning without tools. One model call per thought; output ``{thinking, answer}``.

    Args:
        thinking_format: ``step_by_step``, ``pros_cons`` or ``first_principles``.
        few_shot: Worked examples shown before the problem.
        **options: Those of :class:`BasePattern` (``max_steps`` bounds the number of thoughts).
    """

    default_name = "chain_of_thought"
    default_prompts: ClassVar[dict[str, str]] = {"step": _STEP}
    prompt_fields: ClassVar[dict[str, frozenset[str]]] = {
        "step": frozenset({"problem", "format_instructions", "examples", "previous", "step_number"})
    }

    def __init__(
        self,
        *,
        thinking_format: Literal["step_by_step", "pros_cons", "first_principles"] = "step_by_step",
        few_shot: Sequence[FewShotExample | dict[str, str]] = (),
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if thinking_format not in THINKING_FORMATS:
            known = sorted(THINKING_FORMATS)
            raise ConfigurationError(f"thinking_format must be one of {known}, got {thinking_format!r}")
        self.thinking_format = thinking_format
        self.few_shot = [e if isinstance(e, FewShotExample) else FewShotExample.model_validate(e) for e in few_shot]

    def _examples(self) -> str:
        if not self.few_shot:
            return ""
        shown = "\n\n".join(f"Problem: {e.problem}\nThinking: {e.thinking}\nAnswer: {e.answer}" for e in self.few_shot)
        return f"Examples:\n{shown}\n"

    async def reason(self, run: PatternRun) -> None:
        thoughts: list[Thought] = run.state.setdefault("thoughts", [])
        previous = "\n".join(f"{i}. {t.content}" for i, t in enumerate(thoughts, 1)) or "(none yet)"
        prompt = run.prompt("step", problem=run.input, format_instructions=THINKING_FORMATS[self.thinking_format],
                            examples=self._examples(), previous=previous, step_number=len(thoughts) + 1)  # fmt: skip
        thought = await run.structured(prompt, Thought, purpose="thought")
        thoughts.append(thought)
        run.emit(PatternStepKind.THOUGHT, thought.content, content=thought.content,
                 confidence=thought.confidence, is_final=thought.is_final)  # fmt: skip
        thinking = "\n".join(t.content for t in thoughts)
        answer = (thought.final_answer or thought.content) if thought.is_final else ""
        run.partial = ChainOfThoughtOutput(thinking=thinking, answer=answer)

    async def should_stop(self, run: PatternRun) -> bool:
        return bool(run.state["thoughts"][-1].is_final)

    async def should_continue(self, run: PatternRun) -> bool:
        return True  # only a final thought (should_stop) or max_steps ends the chain
