"""Where each transfer runs on the one host link, over an ordered list of compute nodes.

The same schedule places the ``ao`` ops in the extracted graphs (``offload_extraction``),
predicts when offloaded bytes leave and come back for the fast peak estimate
(``offload_peak``), and says how much of each copy is hidden in compute (the report).
Torch-free: positions and seconds only.

- Forward: copies go out in the order their values' last uses end, each when the link is
  free; a copy's wait is placed after the node during which it completes (so the device
  frees the value then, not at the end of the forward, as sinking every wait would).
- Backward: copies come back as late as they can, latest deadline first, each ending
  before its first use or the next copy's start; the reload is issued before the node
  running when the copy must start (the prefetch), its wait stays at the first use.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Slot:
    """One transfer's place: ``position`` is where its wait goes (forward: after that node)
    or its reload is issued (backward: before that node); ``exposed`` the seconds it runs
    past its window (0 when compute hides it)."""

    position: int
    seconds: float
    exposed: float


def forward_slots(runtimes: Sequence[float], transfers: Sequence[tuple[K, int, float]]) -> dict[K, Slot]:
    """``transfers``: (key, index of the value's last use, copy seconds)."""
    ends = list(accumulate(runtimes))
    total = ends[-1] if ends else 0.0
    free = 0.0
    slots: dict[K, Slot] = {}
    for key, release, seconds in sorted(transfers, key=lambda t: (t[1], str(t[0]))):
        start = max(ends[release] if ends else 0.0, free)
        free = end = start + seconds
        done = next((k for k in range(release, len(ends)) if ends[k] >= end * (1 - 1e-12)), len(ends) - 1)
        slots[key] = Slot(max(done, release), seconds, max(0.0, end - total))
    return slots


def backward_slots(runtimes: Sequence[float], transfers: Sequence[tuple[K, int, float]]) -> dict[K, Slot]:
    """``transfers``: (key, index of the first use, copy seconds)."""
    starts = [0.0, *accumulate(runtimes)][: len(runtimes)]
    limit = float("inf")
    slots: dict[K, Slot] = {}
    for key, use, seconds in sorted(transfers, key=lambda t: (-t[1], str(t[0]))):
        end = min(starts[use] if starts else 0.0, limit)
        limit = start = end - seconds
        issue = max((k for k in range(use + 1) if starts[k] <= max(start, 0.0) * (1 + 1e-12)), default=0)
        slots[key] = Slot(issue, seconds, max(0.0, -start))
    return slots
