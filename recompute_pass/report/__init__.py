"""Stage 5: what a partition decided (``record``), built from the pipeline's results
(``build``, names from ``naming``), published to logs, traces and captures (``publishing``),
and stored for a warm cache's hits (``store``).

Floor 7: may import ``extract``, ``search``, ``memory``, ``graph``, ``torch_internals`` and ``cost_model``.
"""

from __future__ import annotations

from recompute_pass.report.build import build_report, gradients_of
from recompute_pass.report.naming import canonical_names, describe_shape, op_name
from recompute_pass.report.publishing import (
    TRACE_ARTIFACT,
    Reports,
    capture_reports,
    publish,
    publish_step_to_captures,
)
from recompute_pass.report.record import (
    Gradients,
    OffloadedValue,
    PartitionReport,
    RecomputedValue,
    SavedValue,
)

__all__ = [
    "TRACE_ARTIFACT",
    "Gradients",
    "OffloadedValue",
    "PartitionReport",
    "RecomputedValue",
    "Reports",
    "SavedValue",
    "build_report",
    "canonical_names",
    "capture_reports",
    "describe_shape",
    "gradients_of",
    "op_name",
    "publish",
    "publish_step_to_captures",
]
