"""The pydantic models patterns ask the model for, and the typed outputs they return."""

from __future__ import annotations

import enum

from pydantic import BaseModel, Field, field_validator

__all__ = [
    "Branch",
    "BranchList",
    "BranchScore",
    "ChainOfThoughtOutput",
    "ConfidenceReport",
    "Critique",
    "Decomposition",
    "FewShotExample",
    "GoalOutcome",
    "GoalPhase",
    "GoalTask",
    "PhaseOutcome",
    "PhaseTasks",
    "Plan",
    "PlanExecution",
    "PlanStep",
    "ReActOutput",
    "ReflexionOutput",
    "ReflexionRound",
    "StepOutcome",
    "StepStatus",
    "TaskOutcome",
    "Thought",
    "TreeOfThoughtsOutput",
]


class Thought(BaseModel):
    """One reasoning step. ``is_final`` ends the chain; it replaces magic stop phrases."""

    content: str
    confidence: float = Field(0.5, ge=0.0, le=1.0)
    is_final: bool = False
    final_answer: str | None = None


class FewShotExample(BaseModel):
    """A worked example shown to Chain of Thought before the problem."""

    problem: str
    thinking: str
    answer: str


class ChainOfThoughtOutput(BaseModel):
    """Chain of Thought's output: the thinking (thoughts joined) and the answer."""

    thinking: str
    answer: str


class ConfidenceReport(BaseModel):
    """What ReAct's confidence termination reads from a thought."""

    answer: str
    confidence: float = Field(ge=0.0, le=1.0)


class ReActOutput(BaseModel):
    """ReAct's output. ``reasoning`` is empty when the pattern hides its reasoning."""

    answer: str
    confidence: float | None = None
    terminated_by: str
    reasoning: list[str] = Field(default_factory=list)


class StepStatus(enum.StrEnum):
    """Where a plan step is in its life."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"


class PlanStep(BaseModel):
    """One step of a plan. ``dependencies`` are ids of steps that must complete first."""

    id: str
    description: str
    dependencies: list[str] = Field(default_factory=list)
    status: StepStatus = StepStatus.PENDING
    output: str | None = None
    error: str | None = None


class Plan(BaseModel):
    """A goal and the steps to reach it."""

    goal: str
    steps: list[PlanStep] = Field(min_length=1)


class StepOutcome(BaseModel):
    """The model's report on one executed plan step."""

    success: bool
    output: str = ""
    error: str | None = None


class PlanExecution(BaseModel):
    """Plan-and-Execute's output: the final plan with every step's status and output."""

    goal: str
    steps: list[PlanStep]
    answer: str
    replans: int = 0


class Critique(BaseModel):
    """A critic's verdict on an answer. ``score`` (0–1) ranks answers when none is approved."""

    satisfactory: bool
    issues: list[str] = Field(default_factory=list)
    suggestions: list[str] = Field(default_factory=list)
    score: float | None = Field(None, ge=0.0, le=1.0)


class ReflexionRound(BaseModel):
    """One answer and the critique it got."""

    answer: str
    critique: Critique


class ReflexionOutput(BaseModel):
    """Reflexion's output: the chosen answer and every round."""

    answer: str
    satisfied: bool
    rounds: list[ReflexionRound]


class BranchList(BaseModel):
    """Candidate approaches (Tree of Thoughts)."""

    branches: list[str] = Field(min_length=1)


class BranchScore(BaseModel):
    """An evaluation of one candidate."""

    score: float = Field(ge=0.0, le=1.0)
    reasoning: str = ""


class Branch(BaseModel):
    """A scored candidate."""

    thought: str
    score: float
    reasoning: str
    depth: int


class TreeOfThoughtsOutput(BaseModel):
    """Tree of Thoughts' output: the best candidate, and the path of best candidates to it."""

    answer: str
    score: float
    reasoning: str
    path: list[Branch]


def _tasks_from_strings(value: object) -> object:
    # A list of plain strings is an unambiguous, common way to write tasks: read them as simple tasks.
    if isinstance(value, list):
        return [{"description": v} if isinstance(v, str) else v for v in value]
    return value


class GoalTask(BaseModel):
    """A task of a phase; ``complex`` asks for it to be decomposed further (within max_depth)."""

    description: str
    complex: bool = False


class GoalPhase(BaseModel):
    """A phase of a goal."""

    name: str
    description: str = ""
    tasks: list[GoalTask] = Field(default_factory=list)

    _tasks_from_strings = field_validator("tasks", mode="before")(_tasks_from_strings)


class Decomposition(BaseModel):
    """A goal split into phases."""

    goal: str
    phases: list[GoalPhase] = Field(min_length=1)


class PhaseTasks(BaseModel):
    """Tasks generated for a phase that came without any."""

    tasks: list[GoalTask] = Field(min_length=1)

    _tasks_from_strings = field_validator("tasks", mode="before")(_tasks_from_strings)


class TaskOutcome(BaseModel):
    """A task and its answer (``subgoal`` when it was decomposed further)."""

    description: str
    answer: str
    subgoal: GoalOutcome | None = None


class PhaseOutcome(BaseModel):
    """A phase and its tasks' outcomes."""

    name: str
    tasks: list[TaskOutcome]


class GoalOutcome(BaseModel):
    """Goal Decomposition's output: every phase's outcomes and the synthesised answer."""

    goal: str
    phases: list[PhaseOutcome]
    answer: str
