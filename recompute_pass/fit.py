"""The longest size that fits a memory cap: the symbolic peak, inverted.

``fit_longest`` traces the step once with ``dynamic=True`` and captures its joint graph
(``capture``). At a size ``n`` it partitions that graph with the shape symbols evaluated
at ``n`` (``plan_sizes``): the cost model, the plans' peaks and Inductor's memory plan all
read the hints, so each probe is a planning run, not a compile or a step. It then
bisects over the multiples of ``multiple_of`` in ``[low, high]`` for the largest ``n``
whose lowest predicted peak (over the plans searched: ``peak_budget``) fits the cap.

Bisection assumes that lowest peak does not decrease as ``n`` grows: more tokens never
need less memory. It holds for the zoo (every activation grows with ``n``), but the plan
family is searched, not exact, so the probes are checked: a probe with a lower peak than
a smaller size's is logged and noted on the result, and the answer is always a size
whose own probe fits.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import math
import numbers
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from recompute_pass.backend import RecomputeBackend, recompute_backend
from recompute_pass.capture import CapturedStep, NotOneGraph, capture_step
from recompute_pass.graph.sized_inputs import SizedInputs
from recompute_pass.options import RecomputeOptions
from recompute_pass.report import PartitionReport, capture_reports
from recompute_pass.step import PLANNER, StepReport

log = logging.getLogger(__name__)

# How a step of several graphs is compiled: ``compile(model, backend)`` returns what runs.
Compile = Callable[[Callable[..., torch.Tensor], RecomputeBackend], Callable[..., torch.Tensor]]

# Under Inductor, the share of the cap left free for buffers its memory plan cannot show
# before code generation: a C++ kernel keeps a buffer it would drop when a loop loads what
# an earlier loop stored (``must_keep_buffers``). Measured on the zoo's Llama: 33 KB of a
# 96 MiB peak (0.03%); without codegen the peak is exact and nothing is left free.
INDUCTOR_HEADROOM = 0.002


@dataclass(frozen=True)
class Probe:
    """One size planned under the cap: the plan chosen (the cheapest whose predicted peak
    fits, else the lowest-peak plan), its predicted peak and estimated overhead over the
    fastest plan, and the lowest predicted peak of the plans checked; ``report``: the
    graph's (one graph) or the step's (several)."""

    size: int
    lowest_peak_bytes: int
    peak_bytes: int
    overhead_seconds: float
    report: PartitionReport | StepReport

    def fits(self, cap: int) -> bool:
        return self.peak_bytes <= cap


@dataclass(frozen=True)
class FitResult:
    """``size``: the largest fitting size. ``backend``: ``torch.compile(model,
    backend=fit.backend, dynamic=True)`` runs the fastest plan that fits at ``size``.
    ``estimated_overhead_seconds``: the cost model's step time of that plan beyond the
    fastest plan's at ``size`` (recomputation and saved-tensor traffic)."""

    size: int
    backend: RecomputeBackend
    predicted_peak_bytes: int
    estimated_overhead_seconds: float
    summary: str  # the plan's report, as text
    memory_cap: int
    headroom_bytes: int  # of ``memory_cap``, left free: plans fit ``memory_cap - headroom_bytes``
    plan_sizes: tuple[tuple[str, int], ...]
    probes: tuple[Probe, ...]  # every size planned, smallest first
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        kept = f" ({self.headroom_bytes:,} B of it kept free)" if self.headroom_bytes else ""
        return (
            f"longest size {self.size} under {self.memory_cap:,} B{kept}: predicted peak "
            f"{self.predicted_peak_bytes:,} B, est. overhead {self.estimated_overhead_seconds * 1e3:.3g} ms"
        )


def fit_longest(
    model: Callable[..., torch.Tensor],
    make_inputs: Callable[[int], object],
    memory_cap: int,
    *,
    low: int,
    high: int,
    multiple_of: int = 1,
    backend: RecomputeBackend = recompute_backend,
    headroom: float | None = None,
    compile: Compile | None = None,
) -> FitResult:
    """The largest ``n`` in ``[low, high]``, a multiple of ``multiple_of``, at which some
    plan's predicted peak (README, "Budget semantics": the step's peak above the level
    before the forward) is at most ``memory_cap`` bytes.

    ``make_inputs(n)``: the step's inputs at size ``n`` (a tuple, or one tensor), for
    ``model(*inputs)`` returning a scalar loss. ``backend``: whose options (solver, device,
    peak model) plan, and whether Inductor will compile (``recompute_backend``) or not
    (``recompute_eager_backend``); the peak model follows. About
    log2((high - low) / multiple_of) sizes are planned. ``headroom``: the share of the cap
    left free for what the peak model cannot see, in [0, 0.5); default
    ``INDUCTOR_HEADROOM`` under Inductor, 0 without codegen.

    A model that compiles to one graph is traced once, ``dynamic=True``, and each size
    planned from that trace. A step of several graphs (a graph break; ``compile``, which
    compiles the model as it will train: ``compile(model, backend)`` returns what to call,
    per block say) is planned at each size it probes as the step planner plans it
    (``recompute_pass.step``): a few steps at that size with provisional plans and nothing
    compiled for real, so each probe costs steps and traces, not code generation. Compile
    the model the same way with ``fit.backend`` afterwards (the blocks keep the probes'
    backend until then).
    """
    cap, grid = _validate(memory_cap, low, high, multiple_of)
    margin = _validate_headroom(headroom, backend)
    kept_free = math.ceil(cap * margin)
    planned = cap - kept_free  # what every plan's predicted peak must fit
    sized = SizedInputs.of(model, make_inputs, grid[0], grid[-1] if len(grid) > 1 else grid[0] + multiple_of)
    start = time.perf_counter()
    options = backend.options().replace(peak_memory_bytes=planned, memory_budget_bytes=None, fallback=False)
    step: Callable[[int], Probe] | None = None
    captured = None
    if compile is None:
        trace = next(
            (n for n in (grid[len(grid) // 2], grid[-1], grid[0]) if not sized.collides(n)), grid[-1]
        )
        try:
            captured = capture_step(model, sized.args(trace), inductor=backend.inductor)
            log.info(
                "fit_longest: captured the joint graph at n=%d in %.1f s", trace, time.perf_counter() - start
            )
        except NotOneGraph as error:
            log.info("fit_longest: %s; planning each size's step", error)
            compile = compile_whole
    if compile is not None:
        fitted = backend.with_options(peak_memory_bytes=planned, memory_budget_bytes=None, fallback=False)
        step = functools.partial(_step_probe, model, sized, compile, fitted)
    probes: dict[int, Probe] = {}

    def probe(index: int) -> Probe:
        n = grid[index]
        if n not in probes:
            probes[n] = step(n) if step is not None else _probe(captured, sized, options, n)  # type: ignore[arg-type]
        return probes[n]

    if not probe(0).fits(planned):
        raise ValueError(
            f"memory_cap={cap} B (less {kept_free} B headroom) is below the lowest "
            f"predicted peak at the smallest size, low={grid[0]}: {probe(0).lowest_peak_bytes} B"
        )
    best = len(grid) - 1
    if not probe(best).fits(planned):
        fits, fails = 0, best  # probe(fits) fits, probe(fails) does not
        while fails - fits > 1:
            mid = (fits + fails) // 2
            fits, fails = (mid, fails) if probe(mid).fits(planned) else (fits, mid)
        best = fits
    chosen = probes[grid[best]]
    # Several graphs: the step is planned where it runs (static shapes); one graph: at the
    # planned sizes from the one symbolic trace.
    plan_sizes = () if captured is None else sized.plan_sizes(chosen.size, captured.shape_env())
    result = FitResult(
        size=chosen.size,
        backend=backend.with_options(
            peak_memory_bytes=planned, memory_budget_bytes=None, plan_sizes=plan_sizes or None
        ),
        predicted_peak_bytes=chosen.peak_bytes,
        estimated_overhead_seconds=chosen.overhead_seconds,
        summary=chosen.report.to_text(),
        memory_cap=cap,
        headroom_bytes=kept_free,
        plan_sizes=plan_sizes,
        probes=tuple(probes[n] for n in sorted(probes)),
        notes=_monotonicity_notes(probes),
    )
    log.info("fit_longest: %s (%d sizes planned in %.1f s)", result, len(probes), time.perf_counter() - start)
    return result


def compile_whole(
    model: Callable[..., torch.Tensor], backend: RecomputeBackend
) -> Callable[..., torch.Tensor]:
    """``fit_longest``'s default route for a step of several graphs: ``torch.compile`` of the
    whole model (graph breaks make the graphs)."""
    return torch.compile(model, backend=backend)  # type: ignore[return-value]


# Steps a probe of a step of several graphs may run before its plan is made (the first
# compiles: ``step.planner`` records the next).
PROBE_STEPS = 4


def _step_probe(
    model: Callable[..., torch.Tensor],
    sized: SizedInputs,
    compile: Compile,
    backend: RecomputeBackend,
    n: int,
) -> Probe:
    """Size ``n`` of a step of several graphs: the model compiled by ``compile`` at ``n``,
    run (provisional plans, no codegen) until the step is recorded and planned under the
    cap, with nothing compiled for real; gradients left None, random state restored."""
    start = time.perf_counter()
    parameters = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    torch.compiler.reset()
    PLANNER.reset()
    try:
        compiled = compile(model, backend)
        args = sized.args(n)
        with PLANNER.only_planning(), capture_reports() as reports, torch.random.fork_rng():
            for _ in range(PROBE_STEPS):
                compiled(*args).backward()
                for parameter in parameters:
                    parameter.grad = None
                if reports.steps:
                    break
    finally:
        torch.compiler.reset()
        PLANNER.reset()
    if not reports.steps:
        raise RuntimeError(f"fit_longest: the step at n={n} was not planned in {PROBE_STEPS} steps")
    report = reports.steps[-1]
    lowest = report.lowest_bytes if report.lowest_bytes is not None else report.predicted_peak_bytes
    peak = report.predicted_peak_bytes
    return _logged(Probe(n, min(lowest, peak), peak, report.estimated_overhead, report), start)


def _validate(memory_cap: object, low: object, high: object, multiple_of: object) -> tuple[int, list[int]]:
    def integer(name: str, value: object, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
            raise ValueError(f"fit_longest: invalid {name}={value!r}; expected an integer >= {minimum}")
        return int(value)

    cap = integer("memory_cap", memory_cap, 1)
    lo, hi, step = integer("low", low, 1), integer("high", high, 1), integer("multiple_of", multiple_of, 1)
    if lo > hi:
        raise ValueError(f"fit_longest: invalid low={lo} > high={hi}; expected low <= high")
    first = -(-lo // step) * step
    if first > hi:
        raise ValueError(f"fit_longest: invalid multiple_of={step}: no multiple in [{lo}, {hi}]")
    return cap, list(range(first, hi + 1, step))


def _validate_headroom(headroom: object, backend: RecomputeBackend) -> float:
    if headroom is None:
        return INDUCTOR_HEADROOM if backend.inductor else 0.0
    if isinstance(headroom, bool) or not isinstance(headroom, numbers.Real) or not 0 <= headroom < 0.5:
        raise ValueError(
            f"fit_longest: invalid headroom={headroom!r}; expected a share of the cap in [0, 0.5)"
        )
    return float(headroom)


def _probe(captured: CapturedStep, sized: SizedInputs, options: RecomputeOptions, n: int) -> Probe:
    start = time.perf_counter()
    plan_sizes = sized.plan_sizes(n, captured.shape_env())
    with _quiet_infeasible_caps():
        report = captured.partition(options.replace(plan_sizes=plan_sizes))
    assert report.min_bytes is not None and report.predicted_peak_bytes is not None
    # The range's low end is the plan lowest by the fast estimate, checked exactly; the
    # choice, also checked, can be lower still.
    fastest = min((cost for _, cost in report.frontier), default=report.estimated_step_overhead or 0.0)
    overhead = max(0.0, float(report.estimated_step_overhead or 0.0) - fastest)
    peak = int(report.predicted_peak_bytes)
    return _logged(Probe(n, min(report.min_bytes, peak), peak, overhead, report), start)


def _logged(probe: Probe, start: float) -> Probe:
    log.info(
        "fit_longest: n=%d lowest predicted peak %d B, plan %d B (%.1f s)",
        probe.size,
        probe.lowest_peak_bytes,
        probe.peak_bytes,
        time.perf_counter() - start,
    )
    return probe


def _monotonicity_notes(probes: dict[int, Probe]) -> tuple[str, ...]:
    """Bisection's assumption, checked on what was planned."""
    ordered = [probes[n] for n in sorted(probes)]
    notes = []
    for smaller, larger in itertools.pairwise(ordered):
        if larger.lowest_peak_bytes < smaller.lowest_peak_bytes:
            note = (
                f"lowest predicted peak decreases from n={smaller.size} ({smaller.lowest_peak_bytes} B) "
                f"to n={larger.size} ({larger.lowest_peak_bytes} B): bisection may have missed a longer size"
            )
            log.warning("fit_longest: %s", note)
            notes.append(note)
    return tuple(notes)


class _DropInfeasible(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "below the lowest predicted peak" not in record.getMessage()


@contextlib.contextmanager
def _quiet_infeasible_caps() -> Iterator[None]:
    """Probing sizes that do not fit is the point: no warning for each."""
    logger = logging.getLogger("recompute_pass.search.peak_budget")
    dropped = _DropInfeasible()
    logger.addFilter(dropped)
    try:
        yield
    finally:
        logger.removeFilter(dropped)
