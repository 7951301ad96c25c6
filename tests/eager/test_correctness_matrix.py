"""The correctness matrix: models x budgets x static/dynamic shapes x fp32/bf16 autocast,
and fp16 autocast with a GradScaler.

Fast path (our partitioner, graphs run without Inductor codegen) for every cell; Inductor
for a sample. Tolerances, stated once:

- fp32: ``tests.support.harness.RTOL/ATOL`` (1e-5 relative, 1e-6 absolute) against eager.
- bf16 autocast: ``BF16_RTOL/ATOL`` (four bf16 ulps) against eager, whose rounding points
  differ from the decomposed graph's; and *exactly* equal to PyTorch's own partitioner on
  the same decomposed graph, since recomputing an op on the same inputs rounds the same.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator

import pytest
import torch

from benchmarks.harness.models import model_cases
from recompute_pass import capture_reports, recompute_backend, recompute_eager_backend
from recompute_pass import torch_internals as ti
from tests.support.full_size import FULL
from tests.support.harness import (
    ATOL,
    RTOL,
    Step,
    assert_same_step,
    autograd_cache_off,
    build,
    case_inputs,
    run_step,
)
from tests.support.stress import BF16_ATOL, BF16_RTOL, Partitioned, assert_valid, spy_partitions

# CI: one block of each architecture at a small size; full: the default sizes and whole models.
CASES = model_cases() if FULL else model_cases(layers=1, dim=32, seq=16)
MODELS = ["mlp", "gpt_block", "llama_block", "cnn", *(["gpt", "llama"] if FULL else [])]
BUDGETS = [1.0, 0.5, 0.0]
SHAPES = ["static", "dynamic"]
PRECISIONS = ["fp32", "bf16"]
SYMBOL = re.compile(r"\b[su]\d+\b")  # a shape symbol in a report's shape string


pytestmark = pytest.mark.usefixtures("fallback_random")  # conftest: compiled dropout draws eager's masks


@contextlib.contextmanager
def _precision(precision: str) -> Iterator[None]:
    if precision == "bf16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield
    else:
        yield


def _step(name: str, backend: object, shape: str, precision: str) -> Step:
    case = CASES[name]
    with _precision(precision):
        return run_step(build(case), case_inputs(case), backend=backend, dynamic=shape == "dynamic")


@functools.cache
def _eager(name: str, precision: str) -> Step:
    with ti.inductor_config.patch(fallback_random=True):
        return _step(name, None, "static", precision)


@functools.cache
def _pytorch_partitioner(name: str, shape: str, precision: str) -> Step:
    """PyTorch's min-cut partitioner on the same decomposed joint graph (no codegen)."""
    with ti.inductor_config.patch(fallback_random=True):
        return _step(name, ti.eager_aot_backend(ti.min_cut_rematerialization_partition), shape, precision)


@functools.cache
def _ours(
    name: str, budget: float, shape: str, precision: str, mode: str = "peak"
) -> tuple[Step, tuple[Partitioned, ...]]:
    backend = recompute_eager_backend.with_options(memory_budget=budget, budget_mode=mode, fallback=False)
    with ti.inductor_config.patch(fallback_random=True), spy_partitions() as spy:
        step = _step(name, backend, shape, precision)
    return step, tuple(spy.calls)


def _check_report(step: Step, shape: str) -> None:
    (report,) = step.reports
    assert report.fallback is None and report.within_budget
    assert step.saved_bytes == report.saved_bytes  # at the traced sizes, autograd holds what we planned
    symbolic = any(SYMBOL.search(s.shape) for s in report.saved)
    assert symbolic == (shape == "dynamic"), [s.shape for s in report.saved]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", MODELS)
def test_fast_path_matrix(name: str, budget: float, shape: str, precision: str) -> None:
    step, (call,) = _ours(name, budget, shape, precision)
    assert_valid(call)
    _check_report(step, shape)
    if precision == "fp32":
        assert_same_step(step, _eager(name, precision))
    else:
        assert_same_step(step, _eager(name, precision), rtol=BF16_RTOL, atol=BF16_ATOL)
        assert_same_step(step, _pytorch_partitioner(name, shape, precision), rtol=0.0, atol=0.0)


def test_budget_zero_recomputes_in_every_model() -> None:
    """The matrix is not vacuous: at budget 0 each model recomputes, and saves less than at 1
    (saved bytes; at peak budgets, the lowest peak is pinned in ``test_peak_budget``)."""
    for name in MODELS:
        (low,), (high,) = (_ours(name, b, "static", "fp32", "saved")[0].reports for b in (0.0, 1.0))
        assert low.recomputed and low.recompute_flops > high.recompute_flops, name
        assert low.saved_bytes < high.saved_bytes, name


# Inductor: (model, budget, shape, precision). Each compile costs 5-40 s on two cores.
INDUCTOR_SAMPLE = [("mlp", 0.0, "dynamic", "bf16"), ("cnn", 0.5, "static", "fp32")]
INDUCTOR_FULL = [
    ("llama_block", 0.5, "dynamic", "fp32"),
    ("gpt_block", 0.0, "static", "bf16"),
    ("cnn", 0.0, "dynamic", "bf16"),
    ("mlp", 1.0, "static", "fp32"),
]


def _inductor_case(name: str, budget: float, shape: str, precision: str) -> None:
    """fp32: eager within 10x the fast path's tolerance (Inductor fuses and reorders).
    bf16: plain ``torch.compile`` (Inductor, PyTorch's partitioner) within bf16 tolerance;
    Inductor's own bf16 kernels differ from eager's by more than that (on the CNN, 4e-3 on
    a 5e-2 gradient, with or without our partitioner), so eager is no reference there."""
    backend = recompute_backend.with_options(memory_budget=budget, fallback=False)
    with autograd_cache_off(), spy_partitions() as spy:
        step = _step(name, backend, shape, precision)
    (call,) = spy.calls
    assert_valid(call)
    (report,) = step.reports
    assert report.fallback is None and report.within_budget
    # Inductor's layout optimisation saves channels-last copies of conv weights on CPU;
    # the plan charges them (partitioner.charged_static_inputs), so the figures agree.
    assert step.saved_bytes == report.saved_bytes
    if precision == "fp32":
        assert_same_step(step, _eager(name, precision), rtol=10 * RTOL, atol=10 * ATOL)
    else:
        with autograd_cache_off(fallback_random=True):
            pytorch = _step(name, "inductor", shape, precision)
        assert_same_step(step, pytorch, rtol=BF16_RTOL, atol=BF16_ATOL)


# fp16 autocast with a GradScaler: the scaled loss's backward through our graphs, unscaled by
# the scaler, against PyTorch's partitioner on the same decomposed graph (exactly: the same
# ops round the same) and against eager (fp16 rounds at other points: 11-bit mantissa,
# 2**-11 = 4.9e-4, so eight ulps relative).
FP16_RTOL, FP16_ATOL = 4e-3, 1e-3


def _scaled_fp16_step(name: str, backend: object) -> tuple[dict[str, torch.Tensor], list]:
    case = CASES[name]
    model = build(case)
    inputs = case_inputs(case)
    fn = model
    if backend is not None:
        torch.compiler.reset()
        fn = torch.compile(model, backend=backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    with capture_reports() as reports:
        torch.manual_seed(0)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = fn(*inputs)
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    found_inf = sum(v.item() for v in scaler._found_inf_per_device(optimizer).values())
    assert found_inf == 0  # a finite step: the comparison below is not of NaNs
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}, reports


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", MODELS)
def test_fp16_grad_scaler(name: str, budget: float) -> None:
    backend = recompute_eager_backend.with_options(memory_budget=budget, fallback=False)
    ours, reports = _scaled_fp16_step(name, backend)
    assert [r.fallback for r in reports] == [None]
    pytorch, _ = _scaled_fp16_step(name, ti.eager_aot_backend(ti.min_cut_rematerialization_partition))
    torch.testing.assert_close(ours, pytorch, rtol=0.0, atol=0.0)
    eager, _ = _scaled_fp16_step(name, None)
    torch.testing.assert_close(ours, eager, rtol=FP16_RTOL, atol=FP16_ATOL)
