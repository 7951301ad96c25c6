"""The record of one partition: what was decided, in a stable text form and as JSON.

``to_text`` is deterministic for a given graph and options (the snapshot tests pin it);
``to_json`` and ``from_json`` round-trip a report field by field (a warm cache's report
is the stored one, ``report.store``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from cost_model import OpKind


@dataclass(frozen=True)
class SavedValue:
    name: str
    op: str
    shape: str
    dtype: str
    bytes: int
    static: bool  # a parameter or other static-lifetime input: not charged to the budget


@dataclass(frozen=True)
class RecomputedValue:
    name: str
    op: str
    kind: OpKind  # a str enum: its value in JSON
    shape: str
    flops: int


@dataclass(frozen=True)
class OffloadedValue:
    """A saved value held in host memory between forward and backward (``offload``)."""

    name: str
    shape: str
    dtype: str
    bytes: int
    d2h_seconds: float  # estimated copy out, at the profile's device-to-host bandwidth
    h2d_seconds: float  # estimated copy back
    hidden_seconds: float  # of the two, predicted to run beside compute
    exposed_seconds: float  # predicted to run past the compute window (the step waits)


@dataclass(frozen=True)
class Gradients:
    """How many static-lifetime inputs (parameters, buffers) get a gradient, in tensors and
    in elements. The joint graph does not tell a frozen parameter from a buffer: both are
    static inputs without a gradient."""

    tensors: int  # static inputs with a gradient
    static_tensors: int
    elements: int
    static_elements: int
    inputs: int  # any primal input with a gradient (the batch, if it requires grad, too)

    def describe(self) -> str:
        return (
            f"{self.elements:,} of {self.static_elements:,} static-input elements"
            f" in {self.tensors} of {self.static_tensors} tensors (parameters, buffers)"
        )


@dataclass(frozen=True)
class PartitionReport:
    """What one partition decided. The byte, FLOP and time fields are None only in a
    fallback report (``fallback`` set): PyTorch's partitioner decided, and we know none of them."""

    budget_ratio: float | None
    budget_bytes: int | None
    saved_bytes: int | None
    min_bytes: int | None
    max_bytes: int | None
    recompute_flops: int | None
    estimated_recompute_time: float | None  # seconds, cost model
    estimated_step_overhead: float | None  # seconds: recompute plus saved-tensor traffic (the objective)
    solver: str
    optimal: bool
    solve_seconds: float
    device: str
    saved: tuple[SavedValue, ...]
    recomputed: tuple[RecomputedValue, ...]
    notes: tuple[str, ...] = ()
    fallback: str | None = None  # why PyTorch's partitioner was used instead, if it was
    # The memory/time Pareto frontier's convex hull: (saved bytes, estimated step overhead
    # in seconds) per vertex, fewest bytes first; what other budgets would buy.
    frontier: tuple[tuple[int, float], ...] = ()
    # The step's predicted peak (``liveness``): bytes above the level before the forward,
    # and where it is reached ("forward: <name>" or "backward: <name>").
    predicted_peak_bytes: int | None = None
    peak_at: str | None = None
    # How the peak was predicted: "inductor" (Inductor's own memory plan, under
    # torch.compile) or "graph" (the graphs walked as they run without codegen).
    peak_model: str | None = None
    # The predicted live bytes as each node runs: (phase, canonical node name, bytes), in
    # the order the step runs them (``benchmarks.timeline`` draws it against the profiler).
    peak_timeline: tuple[tuple[str, str, int], ...] = ()
    # What the budget fields measure: "saved" activation bytes, or the step's "peak"; in
    # the latter case ``frontier`` holds (predicted peak, estimated overhead) points.
    budget_kind: str = "saved"
    # Identifies the plan: a hash of the graph and of the saved/recomputed names, equal on
    # two ranks that partitioned the same graph the same way (``recompute_pass.plan_sync``).
    # Not in ``to_text``: the text pins decisions, not hashes.
    plan_digest: str = ""
    # Under a process group: this rank, and how many. Every byte figure is this rank's:
    # activations of its local batch (sharded or all-gathered parameters are static inputs).
    rank: int = 0
    world_size: int = 1
    # With ``offload``: the values held in host memory, and the three-way trade-off the
    # peak search saw: (predicted peak, estimated overhead, offloaded bytes) Pareto points.
    offloaded: tuple[OffloadedValue, ...] = ()
    offload_frontier: tuple[tuple[int, float, int], ...] = ()
    # Which static inputs (parameters, buffers) backward computes a gradient for: frozen
    # weights (fine-tuning) get none, and need other values saved than in full training.
    gradients: Gradients | None = None

    @property
    def budgeted_bytes(self) -> int | None:
        """What the budget limits: the predicted peak, or the saved activation bytes."""
        return self.predicted_peak_bytes if self.budget_kind == "peak" else self.saved_bytes

    @property
    def within_budget(self) -> bool:
        """Whether the plan keeps to its budget (fixed policies ignore it; a fallback has none)."""
        used, budget = self.budgeted_bytes, self.budget_bytes
        return used is not None and budget is not None and used <= budget

    def summary(self) -> str:
        if self.fallback:
            return f"recompute_pass: fell back to PyTorch's partitioner: {self.fallback}"
        budget = "absolute" if self.budget_ratio is None else f"ratio {self.budget_ratio:.2f}"
        what = "predicted peak" if self.budget_kind == "peak" else "saved"
        return (
            f"recompute_pass: {what} {_fmt_bytes(self.budgeted_bytes)}"
            f" of budget {_fmt_bytes(self.budget_bytes)} "
            f"({budget}; range {_fmt_bytes(self.min_bytes)}..{_fmt_bytes(self.max_bytes)}), "
            f"recompute {_fmt_count(self.recompute_flops)} FLOP"
            f" ~{_fmt_seconds(self.estimated_recompute_time)}, "
            f"{self.solver}{' optimal' if self.optimal else ''} in {self.solve_seconds:.3f}s"
            + (f", offloaded {_fmt_bytes(sum(o.bytes for o in self.offloaded))}" if self.offloaded else "")
            + (f", rank {self.rank} of {self.world_size}" if self.world_size > 1 else "")
        )

    def to_text(self) -> str:
        """Deterministic for a given graph and options: no timings, canonical names."""
        if self.fallback:
            return self.summary()
        budget = "absolute" if self.budget_ratio is None else f"ratio {self.budget_ratio:g}"
        lines = [
            f"solver: {self.solver}{' (optimal)' if self.optimal else ''}, device: {self.device}",
            f"budget{' (peak)' if self.budget_kind == 'peak' else ''}: {budget}"
            f" -> {_fmt_count(self.budget_bytes)} B"
            f" (range {_fmt_count(self.min_bytes)}..{_fmt_count(self.max_bytes)} B)",
            f"saved: {_fmt_count(self.saved_bytes)} B in {sum(not s.static for s in self.saved)} activations"
            f" (+{sum(s.static for s in self.saved)} static inputs)",
            f"recomputed: {len(self.recomputed)} ops, {_fmt_count(self.recompute_flops)} FLOP,"
            f" est. {_fmt_seconds(self.estimated_recompute_time)}",
            f"predicted peak: {_fmt_count(self.predicted_peak_bytes)} B"
            f" ({self.peak_at}; {self.peak_model} model)",
        ]
        if self.gradients is not None:
            lines.append(f"gradients: {self.gradients.describe()}")
        if self.offloaded:
            hidden = sum(o.hidden_seconds for o in self.offloaded)
            exposed = sum(o.exposed_seconds for o in self.offloaded)
            lines.append(
                f"offloaded: {_fmt_count(sum(o.bytes for o in self.offloaded))} B in {len(self.offloaded)}"
                f" values, transfers est. {_fmt_seconds(hidden)} hidden, {_fmt_seconds(exposed)} exposed"
            )
        lines += [f"note: {n}" for n in self.notes]
        if self.frontier:
            lines.append("frontier (what other budgets buy):")
            lines += _table(
                ("peak bytes" if self.budget_kind == "peak" else "saved bytes", "est. overhead"),
                [(f"{size:,}", _fmt_seconds(cost)) for size, cost in self.frontier],
                numeric=2,
            )
        if self.offload_frontier:
            lines.append("frontier with offload (peak, overhead, offloaded):")
            lines += _table(
                ("peak bytes", "est. overhead", "offloaded bytes"),
                [(f"{p:,}", _fmt_seconds(c), f"{o:,}") for p, c, o in self.offload_frontier],
                numeric=3,
            )
        if self.offloaded:
            lines.append("offloaded to host:")
            lines += _table(
                ("name", "shape", "dtype", "bytes", "d2h", "h2d", "exposed"),
                [
                    (
                        o.name,
                        o.shape,
                        o.dtype,
                        f"{o.bytes:,}",
                        _fmt_seconds(o.d2h_seconds),
                        _fmt_seconds(o.h2d_seconds),
                        _fmt_seconds(o.exposed_seconds),
                    )
                    for o in self.offloaded
                ],
                numeric=4,
            )
        activations = [s for s in self.saved if not s.static]
        if activations:
            lines.append("saved activations:")
            lines += _table(
                ("name", "shape", "dtype", "bytes"),
                [(s.name, s.shape, s.dtype, f"{s.bytes:,}") for s in activations],
            )
        work = [r for r in self.recomputed if r.kind is not OpKind.VIEW]
        if work:
            views = len(self.recomputed) - len(work)
            lines.append(f"recomputed (views, free, not listed: {views}):")
            lines += _table(
                ("name", "shape", "flops"),
                [(r.name, r.shape, f"{r.flops:,}") for r in work],
            )
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> PartitionReport:
        """The report ``to_json`` wrote, equal to it field by field (a warm cache's
        report is the stored one: ``report.store``)."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("recompute_pass: a PartitionReport's JSON is an object")
        data["saved"] = tuple(SavedValue(**value) for value in data.get("saved", ()))
        recomputed = data.get("recomputed", ())
        data["recomputed"] = tuple(RecomputedValue(**{**v, "kind": OpKind(v["kind"])}) for v in recomputed)
        data["offloaded"] = tuple(OffloadedValue(**value) for value in data.get("offloaded", ()))
        data["notes"] = tuple(data.get("notes", ()))
        if data.get("gradients") is not None:
            data["gradients"] = Gradients(**data["gradients"])
        for rows in ("frontier", "peak_timeline", "offload_frontier"):
            data[rows] = tuple(tuple(row) for row in data.get(rows, ()))
        return PartitionReport(**data)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]], numeric: int = 1) -> list[str]:
    """Aligned rows; the last ``numeric`` columns are right-aligned."""
    widths = [max(len(r[k]) for r in (header, *rows)) for k in range(len(header))]
    right = set(range(len(header) - numeric, len(header)))
    out = []
    for r in (header, *rows):
        cells = [
            c.rjust(w) if k in right else c.ljust(w) for k, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def _fmt_count(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "?"
    if s == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"
