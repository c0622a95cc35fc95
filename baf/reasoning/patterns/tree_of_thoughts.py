"""Tree of Thoughts: branch into candidate approaches, score each, keep the best, expand it, repeat."""

from __future__ import annotations

from typing import Any, ClassVar

from baf.errors import ConfigurationError
from baf.reasoning.patterns.base import BasePattern
from baf.reasoning.patterns.models import Branch, BranchList, BranchScore, TreeOfThoughtsOutput
from baf.reasoning.patterns.run import PatternRun
from baf.reasoning.patterns.steps import PatternStepKind

__all__ = ["TreeOfThoughts"]

_BRANCH = (
    "Problem: {problem}\n\n{context}Propose {count} distinct approaches or partial solutions. Make them "
    "genuinely different from each other."
)
_EVALUATE = (
    "Problem: {problem}\n\nCandidate:\n{candidate}\n\nHow promising is this candidate for solving the "
    "problem? Score it from 0 (useless) to 1 (solves it) and say why."
)


class TreeOfThoughts(BasePattern[TreeOfThoughtsOutput]):
    """A beam of width one over ``max_depth`` levels; per level 1 + ``branching_factor`` model calls.

    Level 1 branches on the problem; each later level branches on the best candidate so far. The search
    stops at ``max_depth``, when a candidate scores at least ``good_enough``, or when a level finds
    nothing better than the best so far. The output is the best candidate with the path to it.

    Args:
        branching_factor: Candidates per level.
        good_enough: A score that ends the search early.
        **options: Those of :class:`BasePattern` (``max_depth`` is the number of levels).
    """

    default_name = "tree_of_thoughts"
    default_prompts: ClassVar[dict[str, str]] = {"branch": _BRANCH, "evaluate": _EVALUATE}
    prompt_fields: ClassVar[dict[str, frozenset[str]]] = {
        "branch": frozenset({"problem", "context", "count"}),
        "evaluate": frozenset({"problem", "candidate"}),
    }

    def __init__(self, *, branching_factor: int = 3, good_enough: float = 0.95, **options: Any) -> None:
        options.setdefault("max_steps", 100)  # the tree is bounded by max_depth; steps count levels
        super().__init__(**options)
        if branching_factor < 1:
            raise ConfigurationError(f"branching_factor must be at least 1, got {branching_factor}")
        self.branching_factor = branching_factor
        self.good_enough = good_enough

    async def run(self, run: PatternRun) -> TreeOfThoughtsOutput:
        path: list[Branch] = []
        for depth in range(1, self.max_depth + 1):
            run.begin_step()
            best = path[-1] if path else None
            context = f"Best approach so far (refine or extend it):\n{best.thought}\n\n" if best else ""
            branches = await run.structured(
                run.prompt("branch", problem=run.input, context=context, count=self.branching_factor),
                BranchList, purpose="branch",
            )  # fmt: skip
            candidates = branches.branches[: self.branching_factor]
            run.emit(PatternStepKind.PLAN, f"level {depth}: {len(candidates)} candidates", candidates=candidates,
                     level=depth)  # fmt: skip
            scored = []
            for index, candidate in enumerate(candidates):
                score = await run.structured(run.prompt("evaluate", problem=run.input, candidate=candidate),
                                             BranchScore, purpose="evaluate")  # fmt: skip
                scored.append(Branch(thought=candidate, score=score.score, reasoning=score.reasoning, depth=depth))
                run.emit(PatternStepKind.REFLECTION, f"candidate {index + 1} scored {score.score:.2f}",
                         candidate=candidate, score=score.score, reasoning=score.reasoning, level=depth)  # fmt: skip
            # max() keeps the first of equal scores: the model's own order breaks ties.
            level_best = max(scored, key=lambda b: b.score)
            if best is not None and level_best.score <= best.score:
                run.emit(PatternStepKind.THOUGHT, f"level {depth} found nothing better; stopping", level=depth)
                break
            path.append(level_best)
            run.partial = _output(path)
            run.emit(PatternStepKind.THOUGHT, f"best so far: {level_best.thought}", score=level_best.score,
                     level=depth)  # fmt: skip
            if level_best.score >= self.good_enough:
                break
        return _output(path)


def _output(path: list[Branch]) -> TreeOfThoughtsOutput:
    best = path[-1]
    return TreeOfThoughtsOutput(answer=best.thought, score=best.score, reasoning=best.reasoning, path=list(path))
