"""The records ``cost_accuracy`` measures and ``accuracy_report`` writes up, and the
targets both read: one module beneath both, so that neither imports the other's."""

from __future__ import annotations

from dataclasses import dataclass

OVERHEAD_FLOOR = 0.05  # the target counts points whose measured overhead is >= 5% of the step
TARGET_ERROR = 0.20
ROOFLINE = "roofline"
MEASURED = "measured"


@dataclass(frozen=True)
class PlanRecord:
    """One compiled plan of one model and its measured step."""

    model: str
    costs: str  # ROOFLINE or MEASURED
    budget: float  # the ratio asked, or for ``at_bytes`` the roofline plan's ratio
    at_bytes: bool  # measured costs at the roofline plan's saved bytes (``memory_budget_bytes``)
    budget_bytes: int | None
    saved_bytes: int  # report: activation bytes saved
    graph_saved_bytes: int  # read off the partitioned graphs (RecordingPartitioner)
    recompute_flops: int
    est_overhead: float  # report: estimated step overhead (objective), seconds
    plan: str  # identifies the plan: same text, same graphs
    step_seconds: float  # median over rounds
    step_iqr: float
    grads_ok: bool
    est_delta: float | None = None  # est_overhead minus the same cost model's budget-1.0 plan's
    delta: float | None = None  # median of paired step-time differences from that plan
    delta_iqr: float | None = None
    # Minor page faults per step (median over rounds), and the step's system (kernel) time
    # minus the budget-1.0 plan's, mean over rounds: time outside any op, unpriced by the model.
    faults_per_step: float | None = None
    system_delta: float | None = None
    # ``at_bytes`` only: paired step-time difference from the roofline plan at this budget
    vs_roofline: float | None = None
    vs_roofline_iqr: float | None = None


@dataclass(frozen=True)
class OpError:
    model: str
    op: str  # profiler name and input shapes
    kind: str
    nodes: int  # joint-graph nodes with this key
    roofline_seconds: float  # device="auto" profile, unfused kernel
    measured_seconds: float  # isolated, cost_model.measure
    in_step_seconds: float  # mean per call in a profiled step


@dataclass(frozen=True)
class FusionRecord:
    chain: str
    elements: int
    measured_delta: float  # Inductor: g * chain(x) minus g * y, median of paired differences
    measured_delta_iqr: float
    estimate_measured: float  # sum of the chain's ops' measured fused arithmetic
    estimate_roofline: float  # sum of their roofline fused arithmetic


@dataclass(frozen=True)
class ProfilingTime:
    layers: int
    joint_nodes: int
    timed_nodes: int
    distinct_ops: int
    cold_seconds: float  # empty cache: calibration + every op timed
    warm_seconds: float  # the same call again: the cache read from disk
    measured: int
    failed: int
