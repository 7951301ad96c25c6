"""Offload as a third choice per saved value, as plain data free of torch.

A saved value may be *kept* on the device, *recomputed* in backward, or *offloaded*: copied
to host memory after its last forward use and copied back before its first backward use.
Offloading costs no FLOPs; it costs host-link time, which runs beside compute on its own
stream, and host memory. So the constraints are about time and the link, not work:

- the device-to-host copy starts when the value's last forward use ends and must end
  before the forward does (``release`` .. ``forward_seconds``);
- the host-to-device copy must end before the value's first backward use starts
  (``deadline``), and cannot start before the backward; an offloaded value feeds no
  recomputation (``readers``: recomputing one of them excludes offloading it), so its
  first use is one the graph fixes, not one the plan moves;
- copies share one link per direction: with release times and one common deadline, the
  forward copies fit iff, for every release time r, the copies released at r or later
  take at most ``forward_seconds - r``; with one common start and deadlines, the backward
  ones fit iff, for every deadline d, the copies due by d take at most d (single-machine
  scheduling: release order, and earliest deadline first, are optimal). Both are linear
  rows in the offload variables, which the joint MILP (``offload_solve``) takes as they are;
- host bytes are capped (``host_bytes``);
- a tensor below ``MIN_OFFLOAD_BYTES`` is not worth a transfer (a copy's fixed latency,
  some microseconds, outweighs its bytes), so it is never a choice.

Random outputs may be offloaded (the bytes are the draw's, copied as they are) though they
are never recomputed. The times are estimates of the cost model at the graph's size hints
(``offload_schedule`` computes them); offloaded bytes leave the device between the end of
the copy out and the start of the copy back (``liveness``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

MIN_OFFLOAD_BYTES = 1 << 16  # 64 KiB
# Relative slack on the time rows: estimates are floats, a row met to rounding is met.
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class OffloadItem:
    """A saved value the plan may offload, and its transfer windows."""

    item: int  # index into ``Problem.items``
    size: int  # bytes
    d2h_seconds: float  # the copy to host at the profile's device-to-host bandwidth
    h2d_seconds: float  # the copy back at the host-to-device bandwidth
    release: float  # seconds into the forward when its last forward use ends
    deadline: float  # seconds into the backward when its first backward use starts
    readers: tuple[int, ...] = ()  # items computed from it: none may be recomputed if it is offloaded


@dataclass(frozen=True)
class OffloadProblem:
    """The values that may be offloaded, in item order, and the step's compute times."""

    items: tuple[OffloadItem, ...]
    forward_seconds: float  # the forward's estimated compute time
    backward_seconds: float  # the backward's, recomputation excluded (it only lengthens it)
    host_bytes: int | None  # cap on offloaded bytes; None: none

    @cached_property
    def by_item(self) -> dict[int, OffloadItem]:
        return {o.item: o for o in self.items}

    def forward_rows(self) -> list[tuple[tuple[int, ...], float]]:
        """(items, seconds): the copies released at r or later fit in the forward after r."""
        rows = []
        for release in sorted({o.release for o in self.items}):
            members = tuple(o.item for o in self.items if o.release >= release)
            rows.append((members, self.forward_seconds - release))
        return rows

    def backward_rows(self) -> list[tuple[tuple[int, ...], float]]:
        """(items, seconds): the copies due by d fit in the backward before d."""
        rows = []
        for deadline in sorted({o.deadline for o in self.items}):
            members = tuple(o.item for o in self.items if o.deadline <= deadline)
            rows.append((members, deadline))
        return rows

    def violations(self, offloaded: Iterable[int], recomputed: Iterable[int] = ()) -> list[str]:
        """Why offloading exactly these items (with ``recomputed`` recomputed) breaks a
        window, the host cap or the no-recompute-from-host rule; empty if not."""
        chosen = set(offloaded)
        problems = [f"item {i} may not be offloaded" for i in sorted(chosen - self.by_item.keys())]
        chosen &= self.by_item.keys()
        again = set(recomputed)
        problems += [
            f"item {i} is offloaded but recomputing item {j} reads it"
            for i in sorted(chosen)
            for j in self.by_item[i].readers
            if j in again
        ]
        host = sum(self.by_item[i].size for i in chosen)
        if self.host_bytes is not None and host > self.host_bytes:
            problems.append(f"host bytes {host} exceed the cap {self.host_bytes}")
        for members, seconds in self.forward_rows():
            used = sum(self.by_item[i].d2h_seconds for i in members if i in chosen)
            if used > seconds * (1 + _TOLERANCE) + 1e-15:
                problems.append(f"device-to-host copies of {used:.3g}s exceed the forward's {seconds:.3g}s")
        for members, seconds in self.backward_rows():
            used = sum(self.by_item[i].h2d_seconds for i in members if i in chosen)
            if used > seconds * (1 + _TOLERANCE) + 1e-15:
                problems.append(f"host-to-device copies of {used:.3g}s exceed the backward's {seconds:.3g}s")
        return problems

    def fits(self, offloaded: Iterable[int], recomputed: Iterable[int] = ()) -> bool:
        return not self.violations(offloaded, recomputed)


@dataclass(frozen=True)
class Transfer:
    """One offloaded value as the extracted graphs run it (``offload_extraction``)."""

    name: str  # the saved value's node name
    bytes: int
    d2h_seconds: float
    h2d_seconds: float
    exposed_seconds: float  # predicted transfer time outside compute (forward plus backward)


def link_seconds(problem: OffloadProblem, offloaded: Iterable[int]) -> tuple[float, float]:
    """Total (device-to-host, host-to-device) copy time of the offloaded items."""
    items = [problem.by_item[i] for i in offloaded if i in problem.by_item]
    return sum(o.d2h_seconds for o in items), sum(o.h2d_seconds for o in items)
