"""Bytes allocated at marked points of a step, and the highest level between them.

CUDA has allocator statistics: each mark reads ``memory_allocated`` and the peak since
the previous mark (and resets the peak: a caller measuring ``max_memory_allocated`` over
the recorded step sees only its tail). The CPU allocator keeps none, so there the
profiler records every allocation and free (``profile_memory``), a ``record_function``
range marks each point, and the levels are summed in time order when it stops, as the
project's peak definition measures them. The profiler starts at the first mark: frees of
tensors allocated before it are not reported, so a level after such a free is read high
by its bytes (the prediction stays an upper bound there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from recompute_pass import torch_internals as ti


class Meter(Protocol):
    def mark(self) -> None:
        """A point of the step (the first one starts the measurement)."""
        ...

    def stop(self) -> list[tuple[int, int]]:
        """Per mark: (level, highest level since the previous mark), bytes above the
        level at the first mark."""
        ...


class AllocatorMeter:
    """CUDA: the caching allocator's statistics on one device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.base: int | None = None
        self.points: list[tuple[int, int]] = []

    def mark(self) -> None:
        torch.cuda.synchronize(self.device)
        level = torch.cuda.memory_allocated(self.device)
        if self.base is None:
            self.base = level
            self.points.append((0, 0))
        else:
            peak = torch.cuda.max_memory_allocated(self.device)
            self.points.append((level - self.base, peak - self.base))
        torch.cuda.reset_peak_memory_stats(self.device)

    def stop(self) -> list[tuple[int, int]]:
        return self.points


class ProfilerMeter:
    """CPU: the profiler's allocation events, summed in time order between marks."""

    def __init__(self) -> None:
        self.session: ti.MemoryProfile | None = None
        self.marks = 0

    @staticmethod
    def available() -> bool:
        """False while another profiler runs on this thread (one at a time)."""
        return not ti.profiler_enabled()

    def mark(self) -> None:
        if self.session is None:
            self.session = ti.MemoryProfile.start()
        self.session.mark(self.marks)
        self.marks += 1

    def stop(self) -> list[tuple[int, int]]:
        assert self.session is not None
        marks, allocations = self.session.stop()
        return levels(marks, allocations)


def levels(marks: Sequence[int], allocations: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``marks``: each mark's time; ``allocations``: (time, bytes; negative for a free).
    An allocation at a mark's own time counts after it."""
    ordered = sorted(allocations)
    level, at, points = 0, 0, []
    for mark in marks:
        peak = level
        while at < len(ordered) and ordered[at][0] < mark:
            level += ordered[at][1]
            peak = max(peak, level)
            at += 1
        points.append((level, peak))
    base = points[0][0] if points else 0  # the first mark starts the count
    return [(0, 0)] + [(level - base, peak - base) for level, peak in points[1:]]
