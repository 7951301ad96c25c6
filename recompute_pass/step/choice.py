"""One plan per graph so that the step's predicted peak meets the budget, cheapest first.

Each graph offers a front of plans (``PlanMemory``, exact); a choice is one plan per
graph, its cost the sum over the step's calls of their plans' estimated overhead (a graph
that runs twelve times pays twelve times), its peak the composed step's (``compose``).

- The fastest choice, each graph's cheapest plan, sets the range's top (ratio 1).
- The lowest peak over the choices sets its bottom (ratio 0); ``memory_budget=r`` allows
  ``low + r * (top - low)``, and ``peak_memory_bytes`` is a cap in bytes.
- The choice is the cheapest whose peak fits, ties to the lower peak.

Where the choices are few (``EXHAUSTIVE`` or fewer) every one is composed, so the answer
is exact over the fronts and a lower budget never gives a higher peak. Beyond that (many
distinct graphs, each with its own front), the lowest peak is sought by coordinate
descent and the choice by a greedy exchange (the change that saves the most time per
byte of peak first), which is deterministic but not proven optimal; the choice says so.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from recompute_pass.step.compose import StepPeak, compose
from recompute_pass.step.recording import PlanMemory, StepRecording

# At most this many choices are composed one by one (about half a millisecond each at
# twelve calls); beyond, the search is coordinate-wise.
EXHAUSTIVE = 4096
# Rounds of coordinate descent before the lowest peak found is taken.
ROUNDS = 8

Choice = tuple[int | None, ...]  # per graph: an index into its front (None: nothing to choose)


@dataclass(frozen=True)
class StepChoice:
    choice: Choice
    peak: StepPeak
    cost: float  # estimated overhead over the step, seconds
    budget: int  # the peak the choice was held to
    lowest: int | None  # the lowest step peak found (None: not sought, at ratio 1)
    fastest: int  # the fastest choice's step peak
    searched: int  # choices composed
    exhaustive: bool
    notes: tuple[str, ...] = ()


def choose(
    recording: StepRecording,
    fronts: Sequence[Sequence[PlanMemory] | None],
    *,
    ratio: float | None,
    cap: int | None,
) -> StepChoice:
    """``fronts[g]``: graph ``g``'s plans (None where it has nothing to choose); ``ratio``
    or ``cap`` sets the budget (a cap wins)."""
    search = _Search(recording, fronts)
    fastest = tuple(None if front is None else _cheapest(front) for front in fronts)
    top = search.peak(fastest)
    if cap is None and ratio == 1:
        return search.result(fastest, top.bytes, None, top.bytes, ())
    sizes = [len(front) for front in fronts if front is not None]
    exhaustive = math.prod(sizes) <= EXHAUSTIVE
    choices = list(itertools.product(*(_options(front) for front in fronts))) if exhaustive else None
    frugal = tuple(None if front is None else _frugal(front) for front in fronts)
    lowest = search.lowest(choices if choices is not None else search.descend(frugal))
    low = search.peak(lowest).bytes
    notes: list[str] = []
    if cap is not None:
        budget = max(cap, low)
        if cap < low:
            notes.append(
                f"peak cap {cap:,} B is below the step's lowest predicted peak {low:,} B: lowest used"
            )
    else:
        assert ratio is not None
        budget = low + int((top.bytes - low) * ratio)
    if choices is not None:
        chosen = search.cheapest_within(choices, budget)
    else:
        chosen = search.exchange(lowest, budget)
        notes.append("many graphs: the lowest peak and the choice found by local search, not exhaustively")
    return search.result(chosen, budget, low, top.bytes, tuple(notes), exhaustive=exhaustive)


def _options(front: Sequence[PlanMemory] | None) -> Sequence[int | None]:
    return (None,) if front is None else range(len(front))


def _frugal(front: Sequence[PlanMemory]) -> int:
    """The plan that holds least while others run, then peaks least in its own phases."""
    return min(
        range(len(front)),
        key=lambda i: (front[i].held, max(front[i].forward_peak, front[i].backward_peak), i),
    )


def _cheapest(front: Sequence[PlanMemory]) -> int:
    return min(range(len(front)), key=lambda i: (front[i].cost, front[i].held, front[i].backward_peak, i))


class _Search:
    """Choices composed once each, with their cost over the step."""

    def __init__(self, recording: StepRecording, fronts: Sequence[Sequence[PlanMemory] | None]) -> None:
        self.recording = recording
        self.fronts = fronts
        self.runs = [recording.multiplicity(g) for g in range(len(fronts))]
        self.peaks: dict[Choice, StepPeak] = {}

    def plans(self, choice: Choice) -> list[PlanMemory | None]:
        return [None if i is None else front[i] for front, i in zip(self.fronts, choice, strict=True)]  # type: ignore[index]

    def peak(self, choice: Choice) -> StepPeak:
        found = self.peaks.get(choice)
        if found is None:
            found = self.peaks[choice] = compose(self.recording, self.plans(choice))
        return found

    def cost(self, choice: Choice) -> float:
        return sum(runs * plan.cost for runs, plan in zip(self.runs, self.plans(choice), strict=True) if plan)

    def key(self, choice: Choice) -> tuple[float, int, Choice]:
        """Cheapest first, then the lower peak; the indices break what is left (determinism)."""
        return (self.cost(choice), self.peak(choice).bytes, tuple(-1 if i is None else i for i in choice))  # type: ignore[return-value]

    def lowest(self, choices: Iterable[Choice]) -> Choice:
        return min(choices, key=lambda c: (self.peak(c).bytes, self.key(c)))

    def cheapest_within(self, choices: Iterable[Choice], budget: int) -> Choice:
        fitting = [c for c in choices if self.peak(c).bytes <= budget]
        return min(fitting, key=self.key)

    def neighbours(self, choice: Choice) -> Iterable[Choice]:
        """Each choice that differs from ``choice`` in one graph's plan."""
        for g, front in enumerate(self.fronts):
            if front is not None:
                for i in range(len(front)):
                    if i != choice[g]:
                        yield (*choice[:g], i, *choice[g + 1 :])

    def descend(self, start: Choice) -> list[Choice]:
        """Coordinate descent on the step's peak from ``start``; every choice composed on
        the way (the lowest of them is the range's bottom)."""
        current = start
        for _ in range(ROUNDS):
            best = min([current, *self.neighbours(current)], key=lambda c: (self.peak(c).bytes, self.key(c)))
            if best == current:
                break
            current = best
        return list(self.peaks)

    def exchange(self, start: Choice, budget: int) -> Choice:
        """From the lowest choice, the single change that saves the most estimated time per
        byte of peak, while the peak fits, until none does."""
        current = start
        while True:
            cost, peak = self.cost(current), self.peak(current).bytes
            better = [
                c for c in self.neighbours(current) if self.cost(c) < cost and self.peak(c).bytes <= budget
            ]
            if not better:
                return current
            current = min(better, key=lambda c, cost=cost, peak=peak: self._rate(c, cost, peak))

    def _rate(self, choice: Choice, cost: float, peak: int) -> tuple[float, tuple[float, int, Choice]]:
        """Time saved per byte of peak added (negated: the best first), ties by ``key``."""
        rise = max(1, self.peak(choice).bytes - peak)
        return (-(cost - self.cost(choice)) / rise, self.key(choice))

    def result(
        self,
        choice: Choice,
        budget: int,
        low: int | None,
        top: int,
        notes: tuple[str, ...],
        *,
        exhaustive: bool = True,
    ) -> StepChoice:
        return StepChoice(
            choice=choice,
            peak=self.peak(choice),
            cost=self.cost(choice),
            budget=budget,
            lowest=low,
            fastest=top,
            searched=len(self.peaks),
            exhaustive=exhaustive,
            notes=notes,
        )
