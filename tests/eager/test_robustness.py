"""Robustness: nothing our partitioner does may raise inside a user's training step.

- the exact solver stopped by its time limit: the best feasible plan, one warning;
- an internal error at any stage, or a graph it cannot handle: PyTorch's partitioner, one
  warning naming the cause, gradients still right;
- graphs outside the common path (no backward, nothing saved, custom ops, control flow,
  autograd.Function, tensor hooks): partitioned without falling back;
- the same graph in two processes (different hash seeds): the same report text.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.optimize
import torch
import torch.nn.functional as F
from torch import nn

import recompute_pass.partitioner as partitioner_module
import recompute_pass.realization as realization_module
import recompute_pass.solver.strategies.strategy_milp as milp_module
from benchmarks.harness.models import model_cases
from recompute_pass import capture_reports, recompute_eager_backend
from recompute_pass import torch_internals as ti
from tests.support.full_size import FULL
from tests.support.harness import Step, assert_same_step, build, case_inputs, run_step
from tests.support.stress import assert_same_run, assert_valid, run_steps, spy_partitions

ROOT = Path(__file__).resolve().parents[2]
CASES = model_cases(layers=1, dim=32, seq=16)
_real_milp = scipy.optimize.milp
PYTORCH_FAST_PATH = ti.eager_aot_backend(ti.min_cut_rematerialization_partition)


pytestmark = pytest.mark.usefixtures("fallback_random")  # conftest: compiled dropout draws eager's masks


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Warnings our code logged (the partitioner, its solvers, the cost model)."""
    ours = ("recompute_pass", "cost_model")
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.split(".")[0] in ours
    ]


def _gpt_block_step(backend: object | None, caplog: pytest.LogCaptureFixture | None = None) -> Step:
    case = CASES["gpt_block"]
    if caplog is None:
        return run_step(build(case), case_inputs(case), backend=backend)
    with caplog.at_level(logging.WARNING):
        return run_step(build(case), case_inputs(case), backend=backend)


@pytest.fixture(scope="module")
def eager_gpt_block() -> Step:
    with ti.inductor_config.patch(fallback_random=True):
        return _gpt_block_step(None)


# -- the exact solver's time limit ------------------------------------------------------


def _stopped_without_solution(*args: Any, **kwargs: Any) -> scipy.optimize.OptimizeResult:
    """HiGHS given (next to) no time: stops during presolve, status 1, no solution."""
    options = {**kwargs.pop("options", {}), "time_limit": 1e-6}
    return _real_milp(*args, options=options, **kwargs)


def _stopped_with_solution(*args: Any, **kwargs: Any) -> scipy.optimize.OptimizeResult:
    """HiGHS stopped by the time limit after finding a good plan it could not prove optimal."""
    result = _real_milp(*args, **kwargs)
    assert result.x is not None
    return scipy.optimize.OptimizeResult(x=np.asarray(result.x), status=1, success=False, fun=result.fun)


def _checked_gpt_block_step(backend: Any, caplog, eager: Step) -> tuple[Step, Any]:
    """One step and its report, its gradients equal eager's and its plan valid."""
    with spy_partitions() as spy:
        step = _gpt_block_step(backend, caplog)
    assert_same_step(step, eager)
    (call,) = spy.calls
    assert_valid(call)
    (report,) = step.reports
    return step, report


@pytest.mark.parametrize("milp", [_stopped_without_solution, _stopped_with_solution], ids=["none", "found"])
def test_time_limit_gives_best_feasible_plan_and_one_warning(
    milp: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, caplog, eager_gpt_block: Step
) -> None:
    monkeypatch.setattr(milp_module, "milp", milp)
    backend = recompute_eager_backend.with_options(memory_budget=0.5, budget_mode="saved", fallback=False)
    step, report = _checked_gpt_block_step(backend, caplog, eager_gpt_block)
    assert report.fallback is None and not report.optimal
    assert report.min_bytes < report.saved_bytes <= report.budget_bytes  # the MILP did run
    assert step.saved_bytes == report.saved_bytes
    (warning,) = _warnings(caplog)
    assert "MILP stopped (time limit)" in warning


def test_min_cut_time_limit_gives_best_feasible_plan_and_one_warning(caplog, eager_gpt_block: Step) -> None:
    backend = recompute_eager_backend.with_options(
        solver="mincut", memory_budget=0.5, budget_mode="saved", time_limit=1e-9, fallback=False
    )
    _, report = _checked_gpt_block_step(backend, caplog, eager_gpt_block)
    assert "time limit" in report.notes and not report.optimal
    assert report.saved_bytes <= report.budget_bytes
    (warning,) = _warnings(caplog)
    assert "min-cut search stopped by the time limit" in warning


def test_peak_search_time_limit_gives_a_fitting_plan_and_one_warning(caplog, eager_gpt_block: Step) -> None:
    backend = recompute_eager_backend.with_options(memory_budget=0.5, time_limit=1e-9, fallback=False)
    _, report = _checked_gpt_block_step(backend, caplog, eager_gpt_block)
    assert report.budget_kind == "peak" and report.within_budget and not report.optimal
    (warning,) = _warnings(caplog)
    assert "peak search stopped by the time limit" in warning


def test_real_time_limit_on_a_larger_model(caplog) -> None:
    """A whole (small) GPT where both limits are hit: the min-cut warm start's (a share of
    ``time_limit``) and HiGHS's own, set to a microsecond since the strategy grants HiGHS
    at least 50 ms. Still one warning, and a plan within the budget."""
    case = model_cases(layers=2, dim=32, seq=16)["gpt"]
    expected = run_step(build(case), case_inputs(case))
    options = {"memory_budget": 0.3, "budget_mode": "saved", "time_limit": 1e-9, "fallback": False}
    backend = recompute_eager_backend.with_options(**options)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(milp_module, "milp", _stopped_without_solution)
        with caplog.at_level(logging.WARNING):
            step = run_step(build(case), case_inputs(case), backend=backend)
    assert_same_step(step, expected)
    (report,) = step.reports
    assert report.saved_bytes <= report.budget_bytes and not report.optimal
    assert len(_warnings(caplog)) == 1


# -- internal errors and graphs we cannot handle -----------------------------------------

STAGES = ["prepare", "analyze", "build_problem", "decide", "extract", "build_report"]
# Where each stage is looked up when it runs: the pipeline's module, or the plan's realisation.
STAGE_MODULES = {"extract": realization_module}


def _fail(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("injected failure")


@pytest.mark.parametrize("stage", STAGES)
def test_internal_error_at_any_stage_falls_back(
    stage: str, monkeypatch: pytest.MonkeyPatch, caplog, eager_gpt_block: Step
) -> None:
    monkeypatch.setattr(STAGE_MODULES.get(stage, partitioner_module), stage, _fail)
    step = _gpt_block_step(recompute_eager_backend.with_options(memory_budget=0.0), caplog)
    assert_same_step(step, eager_gpt_block)
    (report,) = step.reports
    assert report.fallback == "RuntimeError: injected failure"
    assert _warnings(caplog) == [
        "recompute_pass: fell back to PyTorch's partitioner: RuntimeError: injected failure"
    ]


def test_error_after_extraction_falls_back(monkeypatch: pytest.MonkeyPatch, caplog, eager_gpt_block) -> None:
    """Extraction has run (and copied out of the joint graph) before the failure."""
    extract = realization_module.extract

    def extract_then_fail(*args: Any, **kwargs: Any) -> Any:
        extract(*args, **kwargs)
        raise ValueError("late failure")

    monkeypatch.setattr(realization_module, "extract", extract_then_fail)
    step = _gpt_block_step(recompute_eager_backend.with_options(memory_budget=0.0), caplog)
    assert_same_step(step, eager_gpt_block)
    assert step.reports[0].fallback == "ValueError: late failure"
    assert len(_warnings(caplog)) == 1


def test_unmodellable_graph_falls_back_naming_the_cause(
    monkeypatch: pytest.MonkeyPatch, caplog, eager_gpt_block: Step
) -> None:
    """A value backward needs that may be neither saved nor recomputed: no valid plan exists."""
    analyze = partitioner_module.analyze
    forbidden: list[str] = []

    def forbid_one_needed_value(*args: Any, **kwargs: Any) -> Any:
        joint = analyze(*args, **kwargs)
        victim = next(c for c in joint.candidates if c.node in joint.needed and c.node.op != "placeholder")
        forbidden.append(victim.node.name)
        candidates = tuple(
            dataclasses.replace(c, can_save=False, can_recompute=False) if c is victim else c
            for c in joint.candidates
        )
        return dataclasses.replace(joint, candidates=candidates)

    monkeypatch.setattr(partitioner_module, "analyze", forbid_one_needed_value)
    step = _gpt_block_step(recompute_eager_backend.with_options(memory_budget=0.5), caplog)
    assert_same_step(step, eager_gpt_block)
    (report,) = step.reports
    assert report.fallback == (
        f"InfeasibleProblem: values needed by backward can be neither saved nor recomputed: {forbidden}"
    )
    (warning,) = _warnings(caplog)
    assert warning == f"recompute_pass: fell back to PyTorch's partitioner: {report.fallback}"


# -- graphs off the common path ------------------------------------------------------------


class NoActivations(nn.Module):
    """Backward needs no forward value at all."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w.sum() * 2 + (x * 3).sum()


@torch.library.custom_op("recompute_stress::scaled_sin", mutates_args=())
def scaled_sin(x: torch.Tensor, k: float) -> torch.Tensor:
    return torch.sin(x) * k


@scaled_sin.register_fake
def _(x: torch.Tensor, k: float) -> torch.Tensor:
    return torch.empty_like(x)


def _scaled_sin_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    (x,) = ctx.saved_tensors
    return grad * torch.cos(x) * ctx.k, None


def _scaled_sin_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0])
    ctx.k = inputs[1]


scaled_sin.register_autograd(_scaled_sin_backward, setup_context=_scaled_sin_setup)


class CustomOp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scaled_sin(self.a(x).tanh(), 3.0).cos().sum()


class Cond(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        y = torch.cond(h.sum() > 0, lambda t: t.sin() * 2, lambda t: t.cos(), (h,))
        return y.square().mean()


class ExpTimesTwo(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = x.exp()
        ctx.save_for_backward(y)
        return y * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return grad * y * 2


class UserFunction(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ExpTimesTwo.apply(self.a(x).tanh()).sum()


class TensorHook(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        h.register_hook(lambda g: g * 2)
        return F.gelu(h).tanh().sum()


class Attention(nn.Module):
    """CPU SDPA with dropout: the attention op itself draws, so it is never recomputed."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(2, 1, 8, 48).chunk(3, -1)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True).square().sum()


UNUSUAL = {
    "no_activations": NoActivations,
    "custom_op": CustomOp,
    "cond": Cond,
    "autograd_function": UserFunction,
    "tensor_hook": TensorHook,
    "sdpa_dropout": Attention,
}


@pytest.mark.parametrize("budget", [1.0, 0.0])
@pytest.mark.parametrize("name", sorted(UNUSUAL))
def test_unusual_graphs_partition_without_fallback(name: str, budget: float) -> None:
    torch.manual_seed(0)
    model = UNUSUAL[name]()
    torch.manual_seed(1)
    inputs = [torch.randn(16, 16)]
    expected = run_steps(model, inputs, steps=2)
    pytorch = run_steps(model, inputs, backend=PYTORCH_FAST_PATH, steps=2)
    backend = recompute_eager_backend.with_options(memory_budget=budget, fallback=False)
    with spy_partitions() as spy:
        run = run_steps(model, inputs, backend=backend, steps=2)
    # Decomposed ops round differently from eager's kernels (PyTorch's own partitioner
    # shows the same differences); recomputing changes no rounding at all.
    assert_same_run(run, expected, rtol=1e-4, atol=1e-5)
    assert_same_run(run, pytorch, rtol=0.0, atol=0.0)
    (call,) = spy.calls
    assert_valid(call)
    if name == "no_activations":
        # Nothing to save; the peak budget's range is the step's peak, one plan's (budget 1
        # searches no range below its plan).
        (report,) = run.reports
        low = None if report.budget_ratio == 1 else report.max_bytes
        assert report.saved_bytes == 0 and report.min_bytes == low and report.max_bytes == report.budget_bytes


def test_inference_graph_is_not_partitioned(caplog) -> None:
    torch.manual_seed(0)
    model = CASES["mlp"].build()
    x = torch.randn(4, 32)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=recompute_eager_backend)
    with torch.no_grad(), capture_reports() as reports, caplog.at_level(logging.WARNING):
        out = compiled(x)
    torch.testing.assert_close(out, model(x))
    assert reports == [] and _warnings(caplog) == []


# -- determinism across processes ----------------------------------------------------------

_SCRIPT = textwrap.dedent(
    """
    import sys

    import torch
    from benchmarks.harness.models import model_cases
    from recompute_pass import capture_reports, recompute_eager_backend
    from recompute_pass import torch_internals as ti

    ti.inductor_config.fallback_random = True
    for name in sys.argv[1:]:
        case = model_cases(layers=1, dim=32, seq=16)[name]
        for solver, budget in (("milp", 0.5), ("mincut", 0.3)):
            torch.manual_seed(0)
            model = case.build()
            torch.manual_seed(1)
            inputs = case.inputs(2)
            torch._dynamo.reset()
            backend = recompute_eager_backend.with_options(memory_budget=budget, solver=solver)
            with capture_reports() as reports:
                torch.compile(model, backend=backend)(*inputs).backward()
            for report in reports:
                print(f"== {name} {solver} {budget}")
                print(report.to_text())
    """
)


REPORT_MODELS = ["gpt_block", "llama_block", "cnn"] if FULL else ["gpt_block", "cnn"]


def _report_text(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, *REPORT_MODELS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
def test_same_graph_same_report_in_two_processes() -> None:
    first, second = _report_text("0"), _report_text("12345")
    reports = 2 * len(REPORT_MODELS)
    assert first.count("== ") == reports and first.count("saved activations:") == reports
    assert "fell back" not in first
    assert first == second
