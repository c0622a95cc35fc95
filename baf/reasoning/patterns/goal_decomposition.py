"""Goal Decomposition: goal → phases → tasks (recursively, up to max_depth), answers synthesised."""

from __future__ import annotations

from typing import Any, ClassVar

from baf.reasoning.patterns.base import BasePattern
from baf.reasoning.patterns.models import Decomposition, GoalOutcome, PhaseOutcome, PhaseTasks, TaskOutcome
from baf.reasoning.patterns.run import PatternRun
from baf.reasoning.patterns.steps import PatternStepKind

__all__ = ["GoalDecomposition"]

_DECOMPOSE = (
    "Goal: {goal}\n\nBreak the goal into a few phases, each with concrete tasks. Mark a task complex only if "
    "it is itself a goal that needs several phases."
)
_PLAN_PHASE = "Goal: {goal}\nPhase: {phase}\n\nList the concrete tasks of this phase."
_EXECUTE_TASK = "Overall goal: {goal}\nPhase: {phase}\n\nCarry out this task and give its result: {task}"
_SYNTHESIZE = "Goal: {goal}\n\nResults of its tasks:\n{results}\n\nCombine them into one answer to the goal."


class GoalDecomposition(BasePattern[GoalOutcome]):
    """Hierarchical decomposition. Calls: 1 decomposition + 1 per task + 1 synthesis, per (sub)goal.

    A task marked ``complex`` is decomposed as a sub-goal while the depth is below ``max_depth``; at
    ``max_depth`` it is solved directly, so recursion always ends. With ``task_pattern`` each simple task
    is delegated to that pattern (e.g. ReAct with tools) instead of one model call. ``max_steps`` bounds
    the tasks carried out in all.

    Args:
        task_pattern: A pattern that carries out each task.
        **options: Those of :class:`BasePattern`.
    """

    default_name = "goal_decomposition"
    default_prompts: ClassVar[dict[str, str]] = {
        "decompose": _DECOMPOSE, "plan_phase": _PLAN_PHASE, "execute_task": _EXECUTE_TASK, "synthesize": _SYNTHESIZE,
    }  # fmt: skip
    prompt_fields: ClassVar[dict[str, frozenset[str]]] = {
        "decompose": frozenset({"goal"}),
        "plan_phase": frozenset({"goal", "phase"}),
        "execute_task": frozenset({"goal", "phase", "task"}),
        "synthesize": frozenset({"goal", "results"}),
    }

    def __init__(self, *, task_pattern: Any = None, **options: Any) -> None:
        options.setdefault("max_steps", 30)
        options.setdefault("max_depth", 2)
        super().__init__(**options)
        self.task_pattern = task_pattern

    async def run(self, run: PatternRun) -> GoalOutcome:
        return await self._solve(run, run.input, level=1)

    async def _solve(self, run: PatternRun, goal: str, level: int) -> GoalOutcome:
        decomposition = await run.structured(run.prompt("decompose", goal=goal), Decomposition, purpose="decompose")
        run.emit(PatternStepKind.PLAN, f"{goal}: {len(decomposition.phases)} phases", goal=goal, level=level,
                 phases=[p.model_dump() for p in decomposition.phases])  # fmt: skip
        phases: list[PhaseOutcome] = []
        for phase in decomposition.phases:
            tasks = phase.tasks
            if not tasks:
                prompt = run.prompt("plan_phase", goal=goal, phase=f"{phase.name}: {phase.description}")
                tasks = (await run.structured(prompt, PhaseTasks, purpose="plan_phase")).tasks
                run.emit(PatternStepKind.PLAN, f"phase {phase.name}: {len(tasks)} tasks", phase=phase.name,
                         tasks=[t.description for t in tasks], level=level)  # fmt: skip
            outcomes: list[TaskOutcome] = []
            for task in tasks:
                if task.complex and level < self.max_depth:
                    run.emit(PatternStepKind.THOUGHT, f"decomposing further: {task.description}", level=level)
                    sub = await self._solve(run, task.description, level + 1)
                    outcomes.append(TaskOutcome(description=task.description, answer=sub.answer, subgoal=sub))
                    continue
                if task.complex:
                    run.emit(PatternStepKind.THOUGHT, f"max_depth {self.max_depth} reached; solving directly: "
                             f"{task.description}", level=level, max_depth=self.max_depth)  # fmt: skip
                run.begin_step()
                answer = await self._execute(run, goal, phase.name, task.description)
                outcomes.append(TaskOutcome(description=task.description, answer=answer))
                run.emit(PatternStepKind.OBSERVATION, f"{task.description}: {answer}", phase=phase.name,
                         task=task.description, answer=answer, level=level)  # fmt: skip
                if level == 1:
                    done = [*phases, PhaseOutcome(name=phase.name, tasks=outcomes)]
                    run.partial = GoalOutcome(goal=goal, phases=done, answer="")
            phases.append(PhaseOutcome(name=phase.name, tasks=outcomes))
        results = "\n".join(f"- [{p.name}] {t.description}: {t.answer}" for p in phases for t in p.tasks)
        answer = await run.ask(run.prompt("synthesize", goal=goal, results=results), purpose="synthesize")
        outcome = GoalOutcome(goal=goal, phases=phases, answer=answer)
        if level == 1:
            run.partial = outcome
        return outcome

    async def _execute(self, run: PatternRun, goal: str, phase: str, task: str) -> str:
        if self.task_pattern is not None:
            result = await run.delegate(self.task_pattern, f"{task}\n\n(Part of the goal: {goal}; phase: {phase})")
            return result.text
        return await run.ask(run.prompt("execute_task", goal=goal, phase=phase, task=task), purpose="execute_task")
