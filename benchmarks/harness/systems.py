"""The systems compared, and how each turns a model into a training step.

Every compiled system runs the same pipeline (Dynamo -> AOTAutograd -> partitioner ->
Inductor, or the graphs run eagerly on the ``graphs`` path); only the partitioner differs,
and it is always wrapped in ``RecordingPartitioner`` so every system is measured the same
way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.harness.partition_stats import BudgetedMinCut, Partitioner, RecordingPartitioner
from recompute_pass import RecomputeOptions, RecomputePartitioner, inductor_backend
from recompute_pass import torch_internals as ti

PATHS = ("inductor", "graphs")
"""``inductor``: real compiled kernels. ``graphs``: the partitioned graphs run eagerly with
Inductor's decompositions and no codegen (``aot_eager_decomp_partition``): seconds instead
of a minute per compile, same partitioners, but without Inductor's joint-graph passes."""


@dataclass(frozen=True)
class System:
    name: str
    label: str  # for tables and plots
    kind: str  # "eager" | "checkpoint" | "compiled"
    budgeted: bool  # swept over budgets; otherwise measured once per model
    solver: str | None = None  # ours: the strategy; None for PyTorch's partitioners
    pytorch_budget: bool = False  # sets ``activation_memory_budget``
    # Ours at an absolute byte budget (``Config.budget_bytes``): the bytes that this other
    # system's plan saves (at the same budget, if it is budgeted).
    bytes_from: str | None = None
    budget_mode: str = "saved"  # ours: what the budget ratio spans ("saved" bytes or the "peak")
    offload: bool = False  # ours: keep, recompute or offload (``RecomputeOptions.offload``)
    # Ours at an absolute peak cap (``Config.budget_bytes``): the peak this other system's
    # step measured (``max_memory_allocated`` on CUDA), at the same budget.
    peak_from: str | None = None

    @property
    def by_bytes(self) -> bool:
        """Whether its budget comes from another system's record (so it runs after it)."""
        return self.bytes_from is not None or self.peak_from is not None

    @property
    def ours(self) -> bool:
        return self.solver is not None

    def partitioner(self, budget: float | None, budget_bytes: int | None) -> Partitioner | None:
        if self.kind != "compiled":
            return None
        if not self.ours:
            return BudgetedMinCut(budget if self.pytorch_budget else None)
        # No silent fallback: a failure of ours is reported as an error, not measured as PyTorch's.
        options = RecomputeOptions(
            solver=self.solver or "milp", budget_mode=self.budget_mode, fallback=False, offload=self.offload
        )
        if self.peak_from is not None:
            options = options.replace(peak_memory_bytes=budget_bytes)
        elif self.by_bytes:
            options = options.replace(memory_budget_bytes=budget_bytes)
        elif budget is not None:
            options = options.replace(memory_budget=budget)
        return RecomputePartitioner(options)


SYSTEMS: dict[str, System] = {
    s.name: s
    for s in (
        System("eager", "eager", "eager", False),
        System("checkpoint", "eager + checkpoint/block", "checkpoint", False),
        System("compile", "torch.compile", "compiled", False),
        System("compile_budget", "torch.compile + memory budget", "compiled", True, pytorch_budget=True),
        System("recompute", "recompute (milp)", "compiled", True, solver="milp"),
        System("recompute_peak", "recompute (peak budget)", "compiled", True, "milp", budget_mode="peak"),
        System("recompute_mincut", "recompute (mincut)", "compiled", True, solver="mincut"),
        # Offload (GPU): recompute+offload at each peak budget, and recompute only at the
        # peak the offload plan measured, the comparison at equal peak.
        System(
            "recompute_offload",
            "recompute + offload (peak budget)",
            "compiled",
            True,
            "milp",
            budget_mode="peak",
            offload=True,
        ),
        System(
            "recompute_peak_at_offload",
            "recompute (peak) @ offload's peak",
            "compiled",
            True,
            "milp",
            budget_mode="peak",
            peak_from="recompute_offload",
        ),
        System("recompute_no_recompute", "recompute: no_recompute", "compiled", False, solver="no_recompute"),
        System(
            "recompute_recompute_all", "recompute: recompute_all", "compiled", False, solver="recompute_all"
        ),
        System("recompute_selective", "recompute: selective", "compiled", False, solver="selective"),
        System("recompute_sqrt_n", "recompute: sqrt_n", "compiled", False, solver="sqrt_n"),
        System(
            "recompute_at_selective",
            "recompute (milp) @ selective's bytes",
            "compiled",
            False,
            "milp",
            bytes_from="recompute_selective",
        ),
        System(
            "recompute_at_pytorch",
            "recompute (milp) @ PyTorch's bytes",
            "compiled",
            True,
            "milp",
            bytes_from="compile_budget",
        ),
    )
}
# Offload needs a host link (a GPU profile); it is asked for by name (docs/offload.md).
OFFLOAD_SYSTEMS = ("recompute_offload", "recompute_peak_at_offload")
DEFAULT_SYSTEMS = tuple(
    name for name in SYSTEMS if name != "recompute_mincut" and name not in OFFLOAD_SYSTEMS
)
QUICK_SYSTEMS = tuple(
    name for name in DEFAULT_SYSTEMS if name not in ("recompute_no_recompute", "recompute_recompute_all")
)
PYTORCH_DEFAULT_BUDGET = ti.functorch_config.activation_memory_budget
"""``compile_budget`` at this budget is ``compile``: the benchmark measures it once."""


def make_backend(recorder: RecordingPartitioner, path: str) -> Callable[..., Any]:
    """A Dynamo backend partitioning with ``recorder`` on the given path."""
    if path == "graphs":
        return ti.eager_aot_backend(recorder)
    return inductor_backend(recorder)  # what ``recompute_backend`` does, the recorder around ours
