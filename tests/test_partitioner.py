"""End to end on the fast path (our partitioner, graphs run without Inductor codegen)."""

from __future__ import annotations

import pytest
import torch

from benchmarks.models import model_cases
from recompute_pass import recompute_eager_backend
from recompute_pass import torch_internals as ti
from tests.harness import assert_same_step, build, case_inputs, run_step

CASES = model_cases()
MODELS = ["mlp", "gpt_block", "llama_block", "cnn"]
BUDGETS = [1.0, 0.75, 0.5, 0.25, 0.0]


@pytest.fixture(autouse=True)
def _same_rng_as_eager():
    # Dropout keeps eager's RNG calls (native_dropout) instead of Inductor's decomposition
    # into rand, so the compiled step draws the same masks as eager from the same seed.
    with ti.inductor_config.patch(fallback_random=True):
        yield


@pytest.fixture(scope="module")
def eager_steps():
    return {name: run_step(build(CASES[name]), case_inputs(CASES[name])) for name in MODELS}


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", MODELS)
def test_gradients_match_eager_and_budget_holds(name: str, budget: float, eager_steps) -> None:
    case = CASES[name]
    backend = recompute_eager_backend.with_options(memory_budget=budget, fallback=False)
    step = run_step(build(case), case_inputs(case), backend=backend)
    assert_same_step(step, eager_steps[name])
    (report,) = step.reports
    assert report.fallback is None
    assert report.saved_bytes <= report.budget_bytes
    assert report.budget_bytes == report.min_bytes + int((report.max_bytes - report.min_bytes) * budget)
    # What autograd really holds is what the report says was saved.
    assert step.saved_bytes == report.saved_bytes


@pytest.mark.parametrize("name", MODELS)
def test_budget_extremes_order_the_plans(name: str) -> None:
    case = CASES[name]
    reports = {}
    for budget in (0.0, 1.0):
        backend = recompute_eager_backend.with_options(memory_budget=budget, fallback=False)
        (reports[budget],) = run_step(build(case), case_inputs(case), backend=backend).reports
    assert reports[0.0].saved_bytes == reports[0.0].min_bytes
    assert reports[1.0].saved_bytes <= reports[1.0].max_bytes
    assert reports[0.0].saved_bytes < reports[1.0].saved_bytes
    assert reports[0.0].recompute_flops > reports[1.0].recompute_flops


def test_absolute_budget_below_minimum_warns_and_uses_minimum(caplog) -> None:
    case = CASES["mlp"]
    backend = recompute_eager_backend.with_options(memory_budget_bytes=1, fallback=False)
    with caplog.at_level("WARNING", logger="recompute_pass"):
        step = run_step(build(case), case_inputs(case), backend=backend)
    (report,) = step.reports
    assert report.saved_bytes == report.min_bytes
    assert sum("memory_budget_bytes=1 is below" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("solver", ["mincut", "no_recompute", "recompute_all", "selective"])
def test_other_solvers_give_correct_gradients(solver: str, eager_steps) -> None:
    case = CASES["gpt_block"]
    backend = recompute_eager_backend.with_options(solver=solver, memory_budget=0.5, fallback=False)
    step = run_step(build(case), case_inputs(case), backend=backend)
    assert_same_step(step, eager_steps["gpt_block"])
    (report,) = step.reports
    assert report.solver == solver
    assert step.saved_bytes == report.saved_bytes


def test_internal_error_falls_back_with_one_warning(monkeypatch, caplog, eager_steps) -> None:
    import recompute_pass.partitioner as partitioner

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(partitioner, "decide", broken)
    case = CASES["mlp"]
    with caplog.at_level("WARNING", logger="recompute_pass"):
        step = run_step(build(case), case_inputs(case), backend=recompute_eager_backend)
    assert_same_step(step, eager_steps["mlp"])
    (report,) = step.reports
    assert report.fallback == "RuntimeError: boom"
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["recompute_pass: fell back to PyTorch's partitioner: RuntimeError: boom"]


def test_fallback_off_raises(monkeypatch) -> None:
    import recompute_pass.partitioner as partitioner

    monkeypatch.setattr(partitioner, "decide", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    case = CASES["mlp"]
    backend = recompute_eager_backend.with_options(fallback=False)
    with pytest.raises(Exception, match="boom"):
        run_step(build(case), case_inputs(case), backend=backend)


def test_dropout_masks_match_eager_at_budget_zero(eager_steps) -> None:
    """PyTorch 2.13's own budget partitioner redraws dropout masks here (DESIGN.md)."""
    case = CASES["gpt_block"]
    backend = recompute_eager_backend.with_options(memory_budget=0.0, fallback=False)
    step = run_step(build(case), case_inputs(case), backend=backend)
    assert_same_step(step, eager_steps["gpt_block"])
    report = step.reports[0]
    recomputed_ops = {r.op for r in report.recomputed}
    assert not recomputed_ops & {"native_dropout", "rand", "bernoulli"}
    assert torch.is_tensor(step.loss)
