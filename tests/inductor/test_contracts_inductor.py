"""The promises PyTorch's checkpointing APIs make, kept at every global budget:
the cases through Inductor (the rest are in ``tests/eager/test_contracts.py``)."""

from __future__ import annotations

import pytest

from benchmarks.harness.models import model_cases
from recompute_pass import recompute_backend
from tests.eager.test_contracts import (
    _assert_region_kept,
)
from tests.support.harness import assert_same_step, autograd_cache_off, build, case_inputs, run_step


@pytest.mark.parametrize("budget", [1.0, 0.3, 0.0])
@pytest.mark.parametrize("selective", [False, True], ids=["checkpoint", "sac"])
def test_checkpoint_region_saves_only_its_inputs_inductor(selective: bool, budget: float) -> None:
    backend = recompute_backend.with_options(memory_budget=budget, fallback=False)
    with autograd_cache_off():
        _assert_region_kept(backend, selective)


def test_replay_through_inductor_matches_eager(fallback_random: None) -> None:
    case = model_cases(layers=1, dim=32, seq=16)["gpt_block"]
    model, inputs = build(case), case_inputs(case)
    backend = recompute_backend.with_options(memory_budget=0.0, budget_mode="saved", fallback=False)
    with autograd_cache_off():
        ours = run_step(model, inputs, backend=backend)
    assert_same_step(ours, run_step(model, inputs), rtol=1e-4, atol=1e-5)
    (report,) = ours.reports
    assert ours.saved_bytes == report.saved_bytes
    assert [s.op for s in report.saved].count("rng_state") >= 1
