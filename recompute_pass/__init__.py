"""torch-recompute: a budgeted, cost-model-driven activation recompute partitioner.

from recompute_pass import recompute_backend
model = torch.compile(model, backend=recompute_backend.with_options(memory_budget=0.3))
"""

from __future__ import annotations

from recompute_pass import config
from recompute_pass.backend import (
    RecomputeBackend,
    inductor_backend,
    recompute_backend,
    recompute_eager_backend,
)
from recompute_pass.fit import FitResult, fit_longest
from recompute_pass.installation import Installation, InstalledPartitioner, install, installed, uninstall
from recompute_pass.options import RecomputeOptions
from recompute_pass.partitioner import RecomputePartitioner
from recompute_pass.report import PartitionReport, capture_reports

__all__ = [
    "FitResult",
    "Installation",
    "InstalledPartitioner",
    "PartitionReport",
    "RecomputeBackend",
    "RecomputeOptions",
    "RecomputePartitioner",
    "capture_reports",
    "config",
    "fit_longest",
    "inductor_backend",
    "install",
    "installed",
    "recompute_backend",
    "recompute_eager_backend",
    "uninstall",
]
