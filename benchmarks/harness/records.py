"""What one measured configuration is, and what it measured: flat records for JSON/CSV."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

GRAD_TOLERANCE = 1e-4
"""Max |grad - eager grad| over all parameters, divided by max |eager grad|: fp32 rounding
of differently fused kernels stays below 1e-5; a redrawn dropout mask gives ~1e-1."""


@dataclass(frozen=True)
class Config:
    model: str
    system: str
    budget: float | None  # None for systems measured once per model
    path: str = "inductor"  # benchmarks.harness.systems.PATHS
    device: str = "cpu"
    size: str = "full"  # benchmarks.harness.cases.SIZES
    repeats: int = 10
    seed: int = 0
    budget_bytes: int | None = None  # absolute budget (system ``recompute_at_selective``)

    def label(self) -> str:
        budget = "" if self.budget is None else f" b={self.budget:.1f}"
        nbytes = "" if self.budget_bytes is None else f" @{self.budget_bytes:,}B"
        return f"{self.model:9s} {self.system}{budget}{nbytes}"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


@dataclass(frozen=True)
class Record:
    """One (model, system, budget). ``None``: not applicable to the system, or not measured
    because the configuration failed (``error``)."""

    model: str
    system: str
    budget: float | None
    budget_bytes: int | None
    path: str
    device: str
    size: str
    error: str | None = None
    # run time
    saved_bytes: int | None = None  # activations held for backward (params, buffers, inputs excluded)
    saved_bytes_method: str | None = None  # "autograd-walk" or "allocator" (see RESULTS.md)
    after_forward_bytes: int | None = None  # allocator: net bytes the forward left allocated
    peak_bytes: int | None = None  # whole forward+backward, above the level at its start
    step_seconds: float | None = None  # median
    step_seconds_iqr: float | None = None
    step_seconds_min: float | None = None
    repeats: int | None = None
    compile_seconds: float | None = None  # first step minus a warm step
    max_grad_diff: float | None = None  # relative to max |eager grad|
    loss_diff: float | None = None
    grads_ok: bool | None = None
    # the partitioned graphs (RecordingPartitioner), summed over graphs
    graphs: int | None = None
    graph_saved_bytes: int | None = None
    graph_saved_input_bytes: int | None = None
    graph_saved_tensors: int | None = None
    recompute_flops: int | None = None
    recompute_heavy_flops: int | None = None  # GEMM, convolution, attention
    recompute_ops: int | None = None
    est_recompute_seconds: float | None = None
    forward_flops: int | None = None
    backward_flops: int | None = None
    partition_seconds: float | None = None
    # our PartitionReport(s), summed over graphs
    report_saved_bytes: int | None = None
    report_recompute_flops: int | None = None
    report_est_recompute_seconds: float | None = None
    report_budget_bytes: int | None = None
    report_min_bytes: int | None = None
    report_predicted_peak_bytes: int | None = None  # our liveness model's peak for the step
    report_max_bytes: int | None = None
    solve_seconds: float | None = None
    solver_optimal: bool | None = None
    fallback: str | None = None
    notes: str | None = None
    wall_seconds: float | None = None  # the whole worker process
    code_hash: str | None = None  # recompute_pass.partitioner.code_hash() of the code measured

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def wrong(self) -> bool:
        return self.grads_ok is False

    @property
    def step_flops(self) -> int | None:
        """FLOPs of the step without recomputation: forward + backward - recompute."""
        if None in (self.forward_flops, self.backward_flops, self.recompute_flops):
            return None
        return self.forward_flops + self.backward_flops - self.recompute_flops  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        return cls(**{f.name: data.get(f.name) for f in dataclasses.fields(cls)})

    @classmethod
    def failed(cls, config: Config, error: str, wall_seconds: float | None = None) -> Record:
        return cls(
            config.model,
            config.system,
            config.budget,
            config.budget_bytes,
            config.path,
            config.device,
            config.size,
            error=error,
            wall_seconds=wall_seconds,
        )


FIELDS = tuple(f.name for f in dataclasses.fields(Record))
