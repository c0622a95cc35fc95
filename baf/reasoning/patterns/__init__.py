"""The reasoning pattern catalogue: ready-made strategies, usable on their own or as state bodies.

Every pattern has ``async execute(llm, input, *, tools=None, session=None, **kw) -> ReasoningResult[T]``;
see ``docs/reasoning_patterns.md`` for what each costs and when to use it. To run one as a state body
(steps recorded in the session log and streamed), use ``baf.library.state.pattern_state``.
"""

from baf.reasoning.patterns.accounting import Budget, CallUsage, Meter, Price, PriceTable
from baf.reasoning.patterns.base import BasePattern, ReasoningPattern
from baf.reasoning.patterns.chain_of_thought import ChainOfThought
from baf.reasoning.patterns.compaction import ContextCompactor
from baf.reasoning.patterns.goal_decomposition import GoalDecomposition
from baf.reasoning.patterns.memory import MemoryManager, WorkingMemory
from baf.reasoning.patterns.pipeline import ReasoningPipeline
from baf.reasoning.patterns.plan_execute import PlanAndExecute
from baf.reasoning.patterns.prompts import PromptTemplate
from baf.reasoning.patterns.react import ReAct
from baf.reasoning.patterns.reflexion import Reflexion
from baf.reasoning.patterns.registry import PatternRegistry, pattern_registry
from baf.reasoning.patterns.result import ReasoningResult, StopReason, as_text
from baf.reasoning.patterns.review import OutputReviewer
from baf.reasoning.patterns.run import PatternRun
from baf.reasoning.patterns.steps import LLMCallInfo, PatternObserver, PatternStep, PatternStepKind
from baf.reasoning.patterns.tree_of_thoughts import TreeOfThoughts

__all__ = [
    "BasePattern",
    "Budget",
    "CallUsage",
    "ChainOfThought",
    "ContextCompactor",
    "GoalDecomposition",
    "LLMCallInfo",
    "MemoryManager",
    "Meter",
    "OutputReviewer",
    "PatternObserver",
    "PatternRegistry",
    "PatternRun",
    "PatternStep",
    "PatternStepKind",
    "PlanAndExecute",
    "Price",
    "PriceTable",
    "PromptTemplate",
    "ReAct",
    "ReasoningPattern",
    "ReasoningPipeline",
    "ReasoningResult",
    "Reflexion",
    "StopReason",
    "TreeOfThoughts",
    "WorkingMemory",
    "as_text",
    "pattern_registry",
]

for _pattern in (ChainOfThought, ReAct, PlanAndExecute, Reflexion, TreeOfThoughts, GoalDecomposition):
    pattern_registry.register(_pattern.default_name, _pattern)
pattern_registry.register(ReasoningPipeline.default_name, ReasoningPipeline)
