"""The step's report: its graphs in step order, the plan each got, and the step's peak.

One per planned step, published once beside the per-graph reports: a summary line at
INFO and the table at DEBUG on logger ``recompute_pass``, the JSON as a structured-trace
artifact (``recompute_pass_step_report``), and into ``capture_reports()``'s ``steps``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recompute_pass import torch_internals as ti
from recompute_pass.report import publish_step_to_captures
from recompute_pass.step.choice import StepChoice
from recompute_pass.step.recording import StepRecording

log = logging.getLogger("recompute_pass.step")

TRACE_ARTIFACT = "recompute_pass_step_report"


@dataclass(frozen=True)
class StepGraphLine:
    name: str
    runs: int  # calls in the step
    planned: bool  # False: its plan was fixed before this step (compiled earlier)
    saved_bytes: int | None  # held from its forward to its backward, per run
    recompute_flops: int | None  # per run
    own_peak_bytes: int | None  # the graph's own predicted peak under the plan, alone
    plans: int  # plans of its front


@dataclass(frozen=True)
class StepReport:
    graphs: tuple[StepGraphLine, ...]
    calls: int
    budget_ratio: float | None  # None: a cap
    budget_bytes: int
    lowest_bytes: int | None  # the step's lowest predicted peak over the choices searched
    fastest_bytes: int  # the fastest choice's step peak
    predicted_peak_bytes: int
    peak_at: str  # where: graph and phase, or between graphs
    estimated_overhead: float  # seconds per step, over the fastest plans
    prologue_bytes: int
    choices_searched: int
    exhaustive: bool
    device: str
    notes: tuple[str, ...] = ()
    planning_seconds: float = 0.0
    compile_seconds: float = 0.0

    @staticmethod
    def unknown(graphs: Sequence[str], why: str) -> StepReport:
        """The report of a step that could not be known: its graphs were planned alone."""
        lines = tuple(StepGraphLine(name, 0, False, None, None, None, 0) for name in graphs)
        note = f"the step is not known: {why}; each graph was planned alone, its budget its own"
        return StepReport(lines, 0, None, 0, None, 0, 0, "unknown", 0.0, 0, 0, True, "", (note,))

    @property
    def known(self) -> bool:
        return self.peak_at != "unknown"

    def timed(self, *, planning: float) -> StepReport:
        return dataclasses.replace(self, planning_seconds=planning)

    def summary(self) -> str:
        if not self.known:
            return f"recompute_pass step: {self.notes[0]}"
        budget = f"ratio {self.budget_ratio}" if self.budget_ratio is not None else "cap"
        return (
            f"recompute_pass step: {len(self.graphs)} graphs, {self.calls} runs; predicted peak "
            f"{self.predicted_peak_bytes:,} B at {self.peak_at}; budget {budget} -> {self.budget_bytes:,} B"
        )

    def to_text(self) -> str:
        if not self.known:
            return "\n".join(
                [f"step: {len(self.graphs)} compiled graphs", *(f"note: {n}" for n in self.notes)]
            )
        low = "?" if self.lowest_bytes is None else f"{self.lowest_bytes:,}"
        budget = f"ratio {self.budget_ratio}" if self.budget_ratio is not None else "cap"
        lines = [
            f"step: {len(self.graphs)} compiled graphs, {self.calls} runs, device {self.device}",
            f"budget: {budget} -> {self.budget_bytes:,} B (step range {low}..{self.fastest_bytes:,} B)",
            f"predicted peak: {self.predicted_peak_bytes:,} B ({self.peak_at})",
            f"est. overhead: {self.estimated_overhead * 1e3:.3g} ms per step",
            f"held before the first graph: {self.prologue_bytes:,} B",
            f"searched: {self.choices_searched} choices{'' if self.exhaustive else ' (local search)'}",
            "graphs, in step order:",
        ]
        header = ("graph", "runs", "saved/run", "recompute FLOP/run", "own peak", "plans")
        rows = [header]
        for g in self.graphs:
            rows.append(
                (
                    g.name + ("" if g.planned else " (fixed)"),
                    str(g.runs),
                    _bytes(g.saved_bytes),
                    _bytes(g.recompute_flops),
                    _bytes(g.own_peak_bytes),
                    str(g.plans),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for row in rows:
            lines.append(
                "  "
                + "  ".join(
                    c.ljust(w) if i == 0 else c.rjust(w)
                    for i, (c, w) in enumerate(zip(row, widths, strict=True))
                )
            )
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def _bytes(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def build_step_report(
    recording: StepRecording,
    graphs: Sequence[Any],
    fronts: Mapping[str, Any],
    choice: StepChoice,
    options: Any,
    planned: Sequence[Any],
) -> StepReport:
    """``graphs``: the step's (``graphs.StepGraph``), in the recording's order; ``planned``:
    those whose plan the step chose (the others ran plans fixed before it)."""
    lines, fastest_cost, chosen = [], 0.0, []
    for index, graph in enumerate(graphs):
        found = fronts.get(graph.key) if graph in planned else None
        plan = found.plans[choice.choice[index]] if found is not None else None
        runs = recording.multiplicity(index)
        if found is not None:
            fastest_cost += runs * min(p.memory.cost for p in found.plans)
        chosen.append(plan)
        lines.append(
            StepGraphLine(
                name=graph.name,
                runs=runs,
                planned=plan is not None,
                saved_bytes=plan.memory.held if plan else None,
                recompute_flops=plan.recompute_flops if plan else None,
                own_peak_bytes=plan.own_peak if plan else None,
                plans=len(found.plans) if found is not None else 0,
            )
        )
    held = _held_by_caller(recording, graphs, chosen)
    notes = list(choice.notes)
    if held:
        notes.append(held)
    limited = ti.recompile_limit_hits()
    if limited:
        notes.append(
            f"Dynamo hit its recompile limit {limited} time(s) in this process: those frames run "
            "uncompiled, outside every plan, their activations all saved (per-layer graphs: HF's "
            "KV cache under use_cache=True; raise torch._dynamo.config.recompile_limit or avoid "
            "the recompiles)"
        )
    return StepReport(
        graphs=tuple(lines),
        calls=len(recording.calls),
        budget_ratio=None if options.peak_memory_bytes is not None else options.memory_budget,
        budget_bytes=choice.budget,
        lowest_bytes=choice.lowest,
        fastest_bytes=choice.fastest,
        predicted_peak_bytes=choice.peak.bytes,
        peak_at=choice.peak.describe(recording),
        estimated_overhead=max(0.0, choice.cost - fastest_cost),
        prologue_bytes=recording.prologue_bytes,
        choices_searched=choice.searched,
        exhaustive=choice.exhaustive,
        device=recording.device,
        notes=tuple(notes),
        compile_seconds=sum(graph.compile_seconds for graph in graphs),
    )


# Output names that say what is held, and the fix (the first match wins).
_FIXES = (
    (
        ("key", "value", "cache", "past"),
        "a KV cache: HF models return one in training unless use_cache=False",
    ),
    (("logits",), "the logits: keep the loss alone (drop the model's output object) before backward"),
)


def _held_by_caller(recording: StepRecording, graphs: Sequence[Any], chosen: Sequence[Any]) -> str:
    """What the caller held through the backward that no gradient read: outputs alive
    when the backward returned, which their graph's plan did not save."""
    totals: dict[str, int] = {}
    for (index, position), size in recording.held_through().items():
        call = recording.calls[index]
        plan = chosen[call.graph]
        if plan is not None and position in plan.memory.saved_outputs:
            continue
        names = graphs[call.graph].output_names
        name = names[position] if position < len(names) else f"output {position}"
        if name == "loss" or size <= 4:  # the loss itself: what backward starts from
            continue
        totals[name] = totals.get(name, 0) + size
    if not totals:
        return ""
    described = ", ".join(
        f"{name} {size:,} B" for name, size in sorted(totals.items(), key=lambda kv: -kv[1])
    )
    fixes = sorted({fix for name in totals for words, fix in _FIXES if any(w in name.lower() for w in words)})
    advice = "; ".join(fixes) if fixes else "drop them before backward if nothing needs them"
    return (
        f"held by the caller through the backward, read by no gradient: {sum(totals.values()):,} B "
        f"({described}); {advice}"
    )


def publish_step(report: StepReport) -> None:
    ti.trace_artifact(TRACE_ARTIFACT, report.to_json)
    log.info(report.summary())
    if log.isEnabledFor(logging.DEBUG):
        log.debug("recompute_pass step plan:\n%s", report.to_text())
    publish_step_to_captures(report)
