"""Where a report goes once made: the log (summary at INFO, table at DEBUG), PyTorch's
structured trace (``TORCH_TRACE``) and the active ``capture_reports`` blocks.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator

from recompute_pass import torch_internals as ti
from recompute_pass.report.record import PartitionReport

log = logging.getLogger("recompute_pass")


class Reports(list[PartitionReport]):
    """The reports a ``capture_reports`` block collected: one ``PartitionReport`` per graph
    partitioned, and in ``steps`` one report per step planned (``recompute_pass.step``)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[object] = []


_collectors: contextvars.ContextVar[tuple[Reports, ...]] = contextvars.ContextVar(
    "recompute_pass_report_collectors", default=()
)


@contextlib.contextmanager
def capture_reports() -> Iterator[Reports]:
    """Collect one ``PartitionReport`` per graph partitioned inside the block, and each
    step's report in the list's ``steps``.

    A hit in AOTAutograd's cache calls no partitioner: it republishes the reports stored
    when the entry was made (``report.store``), so a warm run reports what a
    cold one did. A hit on an entry made before this store existed (or whose store was
    removed) reports nothing; tests that count partitions disable caches
    (``torch._inductor.config.force_disable_caches``).
    """
    reports = Reports()
    token = _collectors.set((*_collectors.get(), reports))
    try:
        yield reports
    finally:
        _collectors.reset(token)


TRACE_ARTIFACT = "recompute_pass_report"
"""The name of the report's artifact in PyTorch's structured trace (``TORCH_TRACE``)."""


def publish(report: PartitionReport) -> None:
    """Log the report (summary at INFO, table at DEBUG), emit it as a JSON artifact of
    PyTorch's structured trace (tlparse lists it with the graph being compiled) and hand it
    to active captures."""
    ti.trace_artifact(TRACE_ARTIFACT, report.to_json)
    if report.fallback:
        log.warning(report.summary())
    else:
        log.info(report.summary())
        if log.isEnabledFor(logging.DEBUG):
            log.debug("recompute_pass partition:\n%s", report.to_text())
    for collector in _collectors.get():
        collector.append(report)


def publish_step_to_captures(report: object) -> None:
    """Hand a step's report to the active captures (``Reports.steps``)."""
    for collector in _collectors.get():
        collector.steps.append(report)
