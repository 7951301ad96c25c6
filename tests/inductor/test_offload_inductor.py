"""Offload end to end on this CPU: plans, rewritten graphs and gradients:
the cases through Inductor (the rest are in ``tests/eager/test_offload.py``)."""

from __future__ import annotations

from recompute_pass import recompute_backend
from tests.eager.test_offload import (  # noqa: F401 (fixtures: pytest finds them by name)
    CASE,
    eager,
    host_tier,
)
from tests.support.harness import assert_same_step, autograd_cache_off, build, case_inputs, run_step
from tests.support.offload_standin import STANDIN_PROFILE


def test_through_inductor(eager: object) -> None:  # noqa: F811
    """Inductor compiles the ``ao`` ops as fallback kernels; its buffer reuse after a wait
    in mid-graph must not write into a storage the wait freed (``offload_extraction``)."""
    with autograd_cache_off():
        backend = recompute_backend.with_options(
            memory_budget=0.0, fallback=False, offload=True, device=STANDIN_PROFILE
        )
        step = run_step(build(CASE), case_inputs(CASE), backend=backend)
    assert_same_step(step, eager)  # type: ignore[arg-type]
    (report,) = step.reports
    assert report.offloaded and report.peak_model == "graph"
