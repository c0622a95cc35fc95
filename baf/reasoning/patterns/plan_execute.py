"""Plan-and-Execute: a typed plan, its steps run in dependency order, an optional re-plan after a failure."""

from __future__ import annotations

from typing import Any, ClassVar

from baf.errors import LLMError, StructuredOutputError
from baf.reasoning.patterns.base import BasePattern
from baf.reasoning.patterns.models import Plan, PlanExecution, PlanStep, StepOutcome, StepStatus
from baf.reasoning.patterns.result import StopReason
from baf.reasoning.patterns.run import PatternRun
from baf.reasoning.patterns.steps import PatternStepKind

__all__ = ["PlanAndExecute"]

_PLAN = (
    "Goal: {goal}\n\nMake a plan: a short list of concrete steps with ids (step_1, step_2, ...). A step "
    "lists the ids of the steps whose results it needs in dependencies."
)
_EXECUTE = (
    "Goal: {goal}\n\nResults of earlier steps:\n{completed}\n\nCarry out this step: {step}\n"
    "Report success (true or false), the step's output, and an error if it failed."
)
_REPLAN = (
    "Goal: {goal}\n\nCompleted steps (keep them, with the same ids):\n{completed}\n\n"
    "This step failed: {failed}\nError: {error}\n\nRevise the plan so that the goal can still be reached."
)


class PlanAndExecute(BasePattern[PlanExecution]):
    """Plan once, then run each step (one model call a step) in dependency order.

    A failed step is marked ``failed``. With ``allow_replan`` the model revises the plan (up to
    ``max_replans`` times): completed steps keep their status and output, and steps of the new plan
    run. Without it, steps that depend on the failed one are ``skipped`` and the rest still run. The run
    succeeds only when no step failed in the end. A step's ``description`` may be delegated to
    ``step_pattern`` (e.g. ReAct with tools) instead of one model call. ``max_steps`` bounds plan steps
    executed plus plans made.

    Args:
        allow_replan: Revise the plan after a failed step.
        max_replans: How many revisions at most.
        step_pattern: A pattern that carries out each step.
        **options: Those of :class:`BasePattern`.
    """

    default_name = "plan_and_execute"
    default_prompts: ClassVar[dict[str, str]] = {"plan": _PLAN, "execute_step": _EXECUTE, "replan": _REPLAN}
    prompt_fields: ClassVar[dict[str, frozenset[str]]] = {
        "plan": frozenset({"goal"}),
        "execute_step": frozenset({"goal", "completed", "step"}),
        "replan": frozenset({"goal", "completed", "failed", "error"}),
    }

    def __init__(
        self, *, allow_replan: bool = False, max_replans: int = 2, step_pattern: Any = None, **options: Any
    ) -> None:
        options.setdefault("max_steps", 20)
        super().__init__(**options)
        self.allow_replan = allow_replan
        self.max_replans = max_replans
        self.step_pattern = step_pattern

    async def run(self, run: PatternRun) -> PlanExecution:
        run.begin_step()
        plan = await run.structured(run.prompt("plan", goal=run.input), Plan, purpose="plan")
        steps = _checked(plan.steps)
        replans, answer = 0, ""
        self._emit_plan(run, steps, "plan")
        while (step := _next_ready(steps)) is not None:
            run.begin_step()
            step.status = StepStatus.RUNNING
            run.emit(PatternStepKind.ACTION, f"{step.id}: {step.description}", step_id=step.id, status="running")
            outcome = await self._execute_step(run, steps, step)
            if outcome.success:
                step.status, step.output = StepStatus.COMPLETED, outcome.output
                answer = outcome.output  # the answer is the output of the last step that completed
            else:
                step.status, step.error = StepStatus.FAILED, outcome.error or "the step reported failure"
            run.emit(PatternStepKind.OBSERVATION, f"{step.id} {step.status.value}: {step.output or step.error}",
                     step_id=step.id, status=step.status.value, output=step.output, error=step.error)  # fmt: skip
            run.partial = _execution(run.input, steps, replans, answer)
            if step.status is StepStatus.FAILED:
                if self.allow_replan and replans < self.max_replans:
                    run.begin_step()
                    replans += 1
                    steps = await self._replan(run, steps, step)
                    self._emit_plan(run, steps, f"revised plan {replans}")
                else:
                    _skip_dependents(steps, step.id)
        result = _execution(run.input, steps, replans, answer)
        if any(s.status is StepStatus.FAILED for s in steps):
            run.failure = StopReason.STEP_FAILED
        return result

    async def _execute_step(self, run: PatternRun, steps: list[PlanStep], step: PlanStep) -> StepOutcome:
        completed = _completed_text([s for s in steps if s.id in step.dependencies] or [])
        if self.step_pattern is not None:
            result = await run.delegate(self.step_pattern, f"{run.input}\n\nStep: {step.description}\n{completed}")
            return StepOutcome(success=result.success, output=result.text,
                               error=None if result.success else f"{result.stop_reason}: {result.error}")  # fmt: skip
        prompt = run.prompt("execute_step", goal=run.input, completed=completed, step=step.description)
        try:
            return await run.structured(prompt, StepOutcome, purpose=f"execute {step.id}")
        except (LLMError, StructuredOutputError) as exc:  # the step failed, the plan may still recover
            return StepOutcome(success=False, error=f"{type(exc).__name__}: {exc}")

    async def _replan(self, run: PatternRun, steps: list[PlanStep], failed: PlanStep) -> list[PlanStep]:
        done = {s.id: s for s in steps if s.status is StepStatus.COMPLETED}
        prompt = run.prompt("replan", goal=run.input, completed=_completed_text(list(done.values())),
                            failed=f"{failed.id}: {failed.description}", error=failed.error or "")  # fmt: skip
        revised = await run.structured(prompt, Plan, purpose="replan")
        # Completed work is kept as it was, whatever the revision says about those ids.
        new_steps = [done.get(s.id, s.model_copy(update={"status": StepStatus.PENDING})) for s in revised.steps]
        kept = [s for s in done.values() if s.id not in {n.id for n in new_steps}]
        return _checked(kept + new_steps)

    def _emit_plan(self, run: PatternRun, steps: list[PlanStep], label: str) -> None:
        run.emit(PatternStepKind.PLAN, f"{label}: {len(steps)} steps",
                 steps=[s.model_dump(mode="json") for s in steps])  # fmt: skip


def _checked(steps: list[PlanStep]) -> list[PlanStep]:
    """Refuse plans that cannot run: duplicate ids, unknown dependencies (cycles surface as skips)."""
    ids = [s.id for s in steps]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    unknown = sorted({d for s in steps for d in s.dependencies if d not in ids})
    if duplicates or unknown:
        raise StructuredOutputError(
            f"The plan cannot be run: duplicate step ids {duplicates}, unknown dependencies {unknown}.",
            "", ["plan check"],
        )  # fmt: skip
    return steps


def _next_ready(steps: list[PlanStep]) -> PlanStep | None:
    status = {s.id: s.status for s in steps}
    for step in steps:
        if step.status is StepStatus.PENDING and all(status[d] is StepStatus.COMPLETED for d in step.dependencies):
            return step
    # Pending steps whose dependencies can never complete (failed, skipped, or a cycle) are skipped.
    for step in steps:
        if step.status is StepStatus.PENDING:
            step.status, step.error = StepStatus.SKIPPED, "its dependencies did not complete"
    return None


def _skip_dependents(steps: list[PlanStep], failed_id: str) -> None:
    blocked = {failed_id}
    changed = True
    while changed:
        changed = False
        for step in steps:
            if step.status is StepStatus.PENDING and blocked.intersection(step.dependencies):
                step.status, step.error = StepStatus.SKIPPED, f"depends on {failed_id}, which failed"
                blocked.add(step.id)
                changed = True


def _completed_text(steps: list[PlanStep]) -> str:
    return "\n".join(f"- {s.id} ({s.description}): {s.output}" for s in steps if s.output) or "(none)"


def _execution(goal: str, steps: list[PlanStep], replans: int, answer: str) -> PlanExecution:
    return PlanExecution(goal=goal, steps=[s.model_copy() for s in steps], answer=answer, replans=replans)
