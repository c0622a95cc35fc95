"""Tool-call validation (issue 17 item 7): µs per ``Tool.validate_args`` call, between source trees.

What the tool-call runner pays for every call a model makes, before the tool runs: parsing the JSON text
and checking it against the tool's parameters. Cells:

- ``small``: ``search(query: str, limit: int = 10)`` with both arguments, the usual shape;
- ``rich``: ten parameters (a pydantic model, an enum, a ``Literal``, a list, optionals, a dict);
- ``nulls``: ``small`` with ``null`` for the defaulted ``limit`` (the default applies);
- ``wrong``: ``rich`` with five problems, the error message built (what a confused model costs);
- ``build``: constructing the ``rich`` tool (once per tool per process);
- ``first``: constructing it and validating one call (its schema and validator are built by then, on
  first use where they are built lazily: the cost a tool that is used pays in all).

Each round runs every cell for every tree, each tree in a fresh interpreter importing baf from that
tree (``PYTHONPATH``); the tools and arguments come from this file, so every tree runs the same work.
Printed per tree and cell: the median and the minimum over rounds of the per-call median, and the
ratio of the medians to the first tree.

    mkdir ../base && git archive <commit> baf | tar -x -C ../base
    python bench/bench_tools.py ../base .                  # 5 rounds, about 30 s
    python bench/bench_tools.py ../base . --rounds 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# Runs in the child: one round of every cell, printed as JSON (µs per call, median of batches).
_ROUND = r"""
import enum, json, statistics, sys, time
from typing import Any, Literal
from pydantic import BaseModel
from baf.errors import ToolArgumentError
from baf.reasoning.tool import Tool


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str
    zip_code: int | None = None


def search(query: str, limit: int = 10) -> list[str]:
    '''Search the catalogue.

    Args:
        query: Free-text search terms.
        limit: How many results to return at most.
    '''
    return []


def rich(name: str, count: int, ratio: float, flag: bool, tags: list[str], order: Literal["asc", "desc"] = "asc",
         color: Color = Color.RED, address: Address | None = None, note: str | None = None,
         scores: dict[str, int] | None = None) -> None:
    '''Take many kinds of argument.'''


RICH_ARGS = json.dumps({"name": "n", "count": 3, "ratio": 2.5, "flag": True, "tags": ["a", "b", "c"],
                        "order": "desc", "color": "blue", "address": {"street": "Main St", "zip_code": 12345},
                        "scores": {"x": 1, "y": 2}})
WRONG_ARGS = json.dumps({"name": 5, "count": "3", "ratio": 2.5, "flag": True, "tags": ["a", 2],
                         "order": "up", "color": "green"})


def per_call(fn, batch):
    samples = []
    for _ in range(15):
        started = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - started) / batch * 1e6)
    return statistics.median(samples)


def refused():
    try:
        wrong.validate_args(WRONG_ARGS)
    except ToolArgumentError:
        return
    raise AssertionError("the wrong arguments were accepted")


small, full, wrong = Tool(search), Tool(rich), Tool(rich)
assert full.validate_args(RICH_ARGS)["color"] is Color.BLUE
assert small.validate_args('{"query": "q", "limit": null}') == {"query": "q"}
import baf
print(json.dumps({
    "baf": baf.__file__,
    "small": per_call(lambda: small.validate_args('{"query": "running shoes", "limit": 5}'), 2000),
    "rich": per_call(lambda: full.validate_args(RICH_ARGS), 500),
    "nulls": per_call(lambda: small.validate_args('{"query": "running shoes", "limit": null}'), 2000),
    "wrong": per_call(refused, 200),
    "build": per_call(lambda: Tool(rich), 10),
    "first": per_call(lambda: Tool(rich).validate_args(RICH_ARGS), 10),
}))
"""

CELLS = ("small", "rich", "nulls", "wrong", "build", "first")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path, help="source trees holding baf/ (the first is the base)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[Path, dict[str, list[float]]] = {tree: {cell: [] for cell in CELLS} for tree in args.trees}
    for number in range(args.rounds):
        for tree in args.trees if number % 2 == 0 else reversed(args.trees):  # alternate who goes first
            env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
            # cwd=tree too: ``python -c`` puts the working directory first on sys.path.
            out = subprocess.run(
                [sys.executable, "-c", _ROUND], env=env, cwd=tree, capture_output=True, text=True, check=True
            )
            measured = json.loads(out.stdout)
            where = Path(measured.pop("baf"))
            if not where.is_relative_to(tree.resolve()):
                raise SystemExit(f"{tree}: the child imported baf from {where}")
            for cell, value in measured.items():
                results[tree][cell].append(value)
    print(f"µs per call; median / min over {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}")
    base = args.trees[0]
    print(f"{'tree':<28}" + "".join(f"{cell:>22}" for cell in CELLS))
    for tree in args.trees:
        row = f"{tree!s:<28}"
        for cell in CELLS:
            values = results[tree][cell]
            ratio = statistics.median(values) / statistics.median(results[base][cell])
            row += f"{statistics.median(values):>9.1f} /{min(values):>6.1f} {ratio:>4.2f}x"
        print(row)


if __name__ == "__main__":
    main()
