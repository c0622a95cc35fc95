"""Token usage, cost and budgets of a pattern run."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

from baf.llm.base import Usage

__all__ = ["Budget", "CallUsage", "Meter", "Price", "PriceTable"]

_cost_of = operator.attrgetter("cost")


@dataclass(frozen=True, slots=True)
class Price:
    """What a model costs, in currency units per million tokens."""

    input_per_million: float
    output_per_million: float

    def cost(self, usage: Usage) -> float:
        """The cost of one call's usage."""
        return (usage.prompt_tokens * self.input_per_million + usage.completion_tokens * self.output_per_million) / 1e6


class PriceTable:
    """Prices by model name. A model that is not listed costs ``default`` (zero unless given)."""

    def __init__(self, prices: Mapping[str, Price] | None = None, default: Price | None = None) -> None:
        self.prices: dict[str, Price] = dict(prices or {})
        self.default = default or Price(0.0, 0.0)

    def cost(self, model: str, usage: Usage) -> float:
        """The cost of ``usage`` tokens on ``model``."""
        return self.prices.get(model, self.default).cost(usage)


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits on what one run (including its nested patterns) may spend; ``None`` means no limit.

    The budget is checked after every model call: the call that crosses it is kept, then the run stops
    cleanly with :class:`~baf.errors.PatternBudgetError` (or a partial result).
    """

    max_tokens: int | None = None
    max_cost: float | None = None

    def exceeded(self, tokens: int, cost: float) -> str | None:
        """Why the budget is spent, or ``None`` while it is not."""
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return f"token budget spent: {tokens} of {self.max_tokens} tokens used"
        if self.max_cost is not None and cost >= self.max_cost:
            return f"cost budget spent: {cost:.6f} of {self.max_cost:.6f} used"
        return None


@dataclass(frozen=True, slots=True)
class CallUsage:
    """Usage and cost of one model call."""

    pattern: str
    purpose: str
    model: str
    usage: Usage
    cost: float


@dataclass(slots=True)
class Meter:
    """Counts usage and cost across a run and the runs nested in it (they share one meter)."""

    prices: PriceTable = field(default_factory=PriceTable)
    budget: Budget = field(default_factory=Budget)
    calls: list[CallUsage] = field(default_factory=list)
    # The usage of the first ``_counted`` calls: the budget is checked after every model call, and adding
    # up every call again each time grew with the run (quadratic in its turns).
    _total: Usage = field(default_factory=Usage, init=False, repr=False, compare=False)
    _counted: int = field(default=0, init=False, repr=False, compare=False)

    @property
    def usage(self) -> Usage:
        """Total usage so far."""
        calls = self.calls
        if self._counted > len(calls):  # calls were taken out of the list: add them all up again
            self._total, self._counted = Usage(), 0
        total = self._total
        for call in calls[self._counted :]:
            total = total + call.usage
        self._total, self._counted = total, len(calls)
        return total

    @property
    def cost(self) -> float:
        """Total cost so far."""
        return sum(map(_cost_of, self.calls))  # the same sum as over a generator, at C speed

    def add(self, pattern: str, purpose: str, model: str, usage: Usage) -> CallUsage:
        """Count one call."""
        entry = CallUsage(pattern, purpose, model, usage, self.prices.cost(model, usage))
        self.calls.append(entry)
        return entry

    def exceeded(self) -> str | None:
        """Why the budget is spent, or ``None``."""
        return self.budget.exceeded(self.usage.total_tokens, self.cost)
