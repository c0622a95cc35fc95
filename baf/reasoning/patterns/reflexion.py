"""Reflexion / self-correct: answer → structured critique → improved answer, until approved or out of rounds."""

from __future__ import annotations

from typing import Any, ClassVar

from baf.llm.base import LLM
from baf.reasoning.patterns.base import BasePattern
from baf.reasoning.patterns.models import Critique, ReflexionOutput, ReflexionRound
from baf.reasoning.patterns.result import StopReason
from baf.reasoning.patterns.run import PatternRun
from baf.reasoning.patterns.steps import PatternStepKind

__all__ = ["Reflexion"]

_ANSWER = "{task}"
_CRITIQUE = (
    "Task: {task}\n\nAnswer to review:\n{answer}\n\n"
    "Critique the answer: is it correct, complete and clear? Set satisfactory to true only if it needs no "
    "change. List concrete issues and suggestions, and score it from 0 to 1."
)
_RETRY = (
    "Task: {task}\n\nYour previous answer:\n{answer}\n\nA reviewer found these issues:\n{issues}\n"
    "Suggestions:\n{suggestions}\n\nWrite an improved answer. Give only the answer."
)


class Reflexion(BasePattern[ReflexionOutput]):
    """Self-correction in rounds: 2 model calls a round (answer, critique).

    The run succeeds when the critic approves. When it never does, the run ends after ``max_rounds``
    with ``success=False``, ``stop_reason="not_approved"`` and the best answer: the highest-scored one
    if the critic gave scores, else the latest.

    Args:
        max_rounds: Answer/critique rounds at most.
        critic: The model that critiques (default: the model that answers).
        **options: Those of :class:`BasePattern`.
    """

    default_name = "reflexion"
    default_prompts: ClassVar[dict[str, str]] = {"answer": _ANSWER, "critique": _CRITIQUE, "retry": _RETRY}
    prompt_fields: ClassVar[dict[str, frozenset[str]]] = {
        "answer": frozenset({"task"}),
        "critique": frozenset({"task", "answer"}),
        "retry": frozenset({"task", "answer", "issues", "suggestions"}),
    }

    def __init__(self, *, max_rounds: int = 3, critic: LLM | None = None, **options: Any) -> None:
        options.setdefault("max_steps", max(max_rounds, 1))
        super().__init__(**options)
        self.max_rounds = max_rounds
        self.critic = critic

    async def reason(self, run: PatternRun) -> None:
        rounds: list[ReflexionRound] = run.state.setdefault("rounds", [])
        if not rounds:
            prompt = run.prompt("answer", task=run.input)
        else:
            last = rounds[-1]
            critique = last.critique
            prompt = run.prompt("retry", task=run.input, answer=last.answer, issues=_bullets(critique.issues),
                                suggestions=_bullets(critique.suggestions))  # fmt: skip
        answer = await run.ask(prompt, purpose="answer" if not rounds else "retry")
        run.state["answer"] = answer
        run.emit(PatternStepKind.THOUGHT, answer, content=answer, round=len(rounds) + 1)

    async def act(self, run: PatternRun) -> Critique:
        prompt = run.prompt("critique", task=run.input, answer=run.state["answer"])
        return await run.structured(prompt, Critique, purpose="critique", llm=self.critic)

    async def observe(self, run: PatternRun, action: Critique) -> None:
        rounds: list[ReflexionRound] = run.state["rounds"]
        rounds.append(ReflexionRound(answer=run.state["answer"], critique=action))
        verdict = "approved" if action.satisfactory else f"{len(action.issues)} issue(s)"
        run.emit(PatternStepKind.REFLECTION, f"critique: {verdict}", **action.model_dump(), round=len(rounds))
        run.partial = ReflexionOutput(answer=_best(rounds).answer, satisfied=action.satisfactory, rounds=list(rounds))

    async def should_continue(self, run: PatternRun) -> bool:
        rounds: list[ReflexionRound] = run.state["rounds"]
        if rounds[-1].critique.satisfactory:
            return False
        if len(rounds) >= self.max_rounds:
            run.failure = StopReason.NOT_APPROVED
            return False
        return True

    async def extract_output(self, run: PatternRun) -> ReflexionOutput:
        output: ReflexionOutput = run.partial
        if output.satisfied:
            output.answer = run.state["rounds"][-1].answer  # the approved answer, not an earlier best
        return output


def _best(rounds: list[ReflexionRound]) -> ReflexionRound:
    if rounds[-1].critique.satisfactory:
        return rounds[-1]
    scored = [r for r in rounds if r.critique.score is not None]
    if not scored:
        return rounds[-1]
    # max() keeps the first of equal scores; reversed so that a later answer wins a tie.
    return max(reversed(scored), key=lambda r: r.critique.score or 0.0)


def _bullets(items: list[str]) -> str:
    return "\n".join(f"- {item}" for item in items) or "- (none given)"
