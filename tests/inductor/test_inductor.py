"""Through Inductor: our partitioner decides, Inductor generates the C++ kernels.

Each compile costs tens of seconds on two cores, so this samples one model at three
budgets; the fast path (test_partitioner.py) covers the rest.
"""

from __future__ import annotations

import pytest

from benchmarks.harness.models import model_cases
from recompute_pass import recompute_backend
from tests.support.harness import assert_same_step, autograd_cache_off, build, case_inputs, run_step

CASE = model_cases(layers=1, dim=32, seq=16)["gpt_block"]


@pytest.fixture(scope="module")
def steps():
    with autograd_cache_off(fallback_random=True):
        model, inputs = build(CASE), case_inputs(CASE)
        eager = run_step(model, inputs)
        pytorch = run_step(model, inputs, backend="inductor")
        ours = {
            budget: run_step(
                model, inputs, backend=recompute_backend.with_options(memory_budget=budget, fallback=False)
            )
            for budget in (1.0, 0.5, 0.0)
        }
    return eager, pytorch, ours


@pytest.mark.parametrize("budget", [1.0, 0.5, 0.0])
def test_inductor_gradients_match_eager_and_pytorch(budget: float, steps) -> None:
    eager, pytorch, ours = steps
    step = ours[budget]
    assert_same_step(step, eager)
    assert_same_step(step, pytorch)
    (report,) = step.reports
    assert report.fallback is None and report.within_budget
    assert step.saved_bytes == report.saved_bytes


def test_inductor_budget_orders_memory(steps) -> None:
    """Peak budgets (the default): the predicted peak falls with the budget."""
    _, _, ours = steps
    peaks = [ours[b].reports[0].predicted_peak_bytes for b in (1.0, 0.5, 0.0)]
    assert peaks[0] >= peaks[1] >= peaks[2] and peaks[0] > peaks[2]
