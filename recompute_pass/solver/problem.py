"""The save-or-recompute decision as plain data, free of torch.

Each item is a value the forward can produce. A plan says, per item, whether it is
*saved* (crosses to backward, costing ``size`` bytes of the budget and ``save_cost``
seconds of memory traffic) or *recomputed* in backward (costing ``recompute_cost``
seconds, and requiring each of its ``inputs`` to be saved or recomputed too). Items in
``needed`` must be available in backward one way or the other.

This is a closure problem: without the byte budget it is a minimum s-t cut; with it, a
MILP whose constraint matrix is totally unimodular but for the one budget row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol, TypeVar

K = TypeVar("K", bound=Hashable)


class InfeasibleProblem(ValueError):
    """Some needed value can be neither saved nor recomputed."""


class Obtainable(Protocol[K]):
    """What decides whether backward can have a value: an ``Item``, or a joint-graph
    candidate whose inputs are graph nodes."""

    @property
    def can_save(self) -> bool: ...

    @property
    def can_recompute(self) -> bool: ...

    @property
    def inputs(self) -> Sequence[K]: ...


def find_rebuildable(values: Mapping[K, Obtainable[K]]) -> frozenset[K]:
    """The values backward can recompute from values it can have (saved, or rebuildable
    in turn); backward can have a value when it can be saved or is rebuildable.

    The least fixpoint, so it neither needs graph order nor is misled without it: a
    value whose rebuild depends on one that can be neither saved nor rebuilt (the tensor
    of a random multi-output op, say) is not rebuildable. Every input must be a key.
    """
    rebuilt: set[K] = set()
    changed = True
    while changed:
        changed = False
        for key, value in values.items():
            if (
                key not in rebuilt
                and value.can_recompute
                and all(j in rebuilt or values[j].can_save for j in value.inputs)
            ):
                rebuilt.add(key)
                changed = True
    return frozenset(rebuilt)


@dataclass(frozen=True)
class Item:
    name: str
    size: int
    save_cost: float
    recompute_cost: float
    inputs: tuple[int, ...]
    can_save: bool
    can_recompute: bool
    # Recomputing a forward value repeats work; computing a value only backward uses
    # ("unclaimed" in PyTorch's terms) in backward does not, so it is not counted as
    # recompute in reports.
    is_forward: bool = True
    # The op's class, for policies that decide by it (``costing`` fills these from the
    # cost model, so strategies stay free of torch):
    is_matrix: bool = False  # a compute-bound matmul, convolution or attention kernel
    selects_output: bool = False  # one result of a multi-output op (its input): no work of its own
    fuses: bool = False  # computed inside the kernels that read it (pointwise, view, constructor)
    # The repeated block (layer) it was traced in, by index; -1 outside every block, or in
    # a graph that repeats none (``graph.blocks``): segment plans cut at block boundaries.
    block: int = -1


@dataclass(frozen=True)
class Problem:
    items: tuple[Item, ...]
    needed: frozenset[int]

    def __post_init__(self) -> None:
        n = len(self.items)
        for i, item in enumerate(self.items):
            if any(not 0 <= j < n or j == i for j in item.inputs):
                raise ValueError(f"item {item.name!r} has an input index out of range or itself")
            if item.size < 0 or item.save_cost < 0 or item.recompute_cost < 0:
                raise ValueError(f"item {item.name!r} has a negative size or cost")
        if any(not 0 <= j < n for j in self.needed):
            raise ValueError("needed index out of range")

    def __len__(self) -> int:
        return len(self.items)

    @cached_property
    def rebuildable(self) -> frozenset[int]:
        """Items backward can recompute (``find_rebuildable``); computed once per problem."""
        return find_rebuildable(dict(enumerate(self.items)))

    def check_feasible(self) -> None:
        """Raise ``InfeasibleProblem`` naming the needed values that no plan can provide."""
        items = self.items
        missing = sorted(
            items[i].name for i in self.needed if not items[i].can_save and i not in self.rebuildable
        )
        if missing:
            raise InfeasibleProblem(
                f"values needed by backward can be neither saved nor recomputed: {missing}"
            )

    def reach(self, through: Container[int] | None = None) -> frozenset[int]:
        """The needed items and the inputs they depend on, walking from an item to its
        inputs only when it is in ``through`` (from every item when None)."""
        seen: set[int] = set()
        stack = sorted(self.needed)
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            if through is None or i in through:
                stack += self.items[i].inputs
        return frozenset(seen)

    def restrict(self, *, can_save: set[int] | None = None, can_recompute: set[int] | None = None) -> Problem:
        """The same problem with saving/recomputing allowed only on the given items (the
        items left as they were are shared: a deep graph's segment plans restrict tens of
        thousands of them many times)."""
        items = []
        for i, it in enumerate(self.items):
            save = it.can_save and (can_save is None or i in can_save)
            recompute = it.can_recompute and (can_recompute is None or i in can_recompute)
            unchanged = save == it.can_save and recompute == it.can_recompute
            items.append(it if unchanged else dataclasses.replace(it, can_save=save, can_recompute=recompute))
        return Problem(tuple(items), self.needed)


@dataclass(frozen=True)
class Plan:
    saved: frozenset[int]
    recomputed: frozenset[int]
    # Saved items held in host memory between forward and backward (``recompute_pass.offloading.problem``):
    # off the device between their offload and their reload; a subset of ``saved``.
    offloaded: frozenset[int] = frozenset()

    def size(self, problem: Problem) -> int:
        return sum(problem.items[i].size for i in self.saved)

    def device_size(self, problem: Problem) -> int:
        """Saved bytes that stay on the device: the saved ones but those offloaded."""
        return sum(problem.items[i].size for i in self.saved - self.offloaded)

    def cost(self, problem: Problem) -> float:
        items = problem.items
        return sum(items[i].save_cost for i in self.saved) + sum(
            items[i].recompute_cost for i in self.recomputed
        )

    def violations(self, problem: Problem) -> list[str]:
        """Why the plan is not executable; empty when it is."""
        items = problem.items
        problems: list[str] = []
        for i in sorted(self.saved & self.recomputed):
            problems.append(f"{items[i].name} is both saved and recomputed")
        for i in sorted(self.saved):
            if not items[i].can_save:
                problems.append(f"{items[i].name} may not be saved")
        problems += [
            f"{items[i].name} is offloaded but not saved" for i in sorted(self.offloaded - self.saved)
        ]
        available = self.saved | self.recomputed
        for i in sorted(self.recomputed):
            if not items[i].can_recompute:
                problems.append(f"{items[i].name} may not be recomputed")
            problems += [
                f"{items[i].name} is recomputed but its input {items[j].name} is unavailable"
                for j in items[i].inputs
                if j not in available
            ]
        problems += [f"{items[i].name} is needed but unavailable" for i in sorted(problem.needed - available)]
        return problems

    def pruned(self, problem: Problem) -> Plan:
        """Drop saved/recomputed items that nothing needed depends on (zero-cost ties)."""
        keep = problem.reach(through=self.recomputed)
        return Plan(self.saved & keep, self.recomputed & keep, self.offloaded & keep)
