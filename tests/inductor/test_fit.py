"""``fit_longest`` and ``plan_sizes``: the longest size under a cap, from one dynamic trace.

Without codegen (``recompute_eager_backend``) the predicted peak is exact, so the fitted
plan is checked against the allocator: it fits at the fitted size, and the next size does
not fit any plan. One reduced Inductor run checks the same through compiled kernels.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

from benchmarks.harness.meters import step_memory
from benchmarks.harness.models import GPT, MLP, GPTConfig, Llama, LlamaConfig
from cost_model import get_profile
from recompute_pass import (
    FitResult,
    RecomputeOptions,
    capture_reports,
    fit_longest,
    recompute_backend,
    recompute_eager_backend,
)
from recompute_pass.capture import capture_step
from recompute_pass.graph.costing import build_problem
from recompute_pass.graph.sized_inputs import SizedInputs
from recompute_pass.partitioner import partition
from recompute_pass.search.peak_budget import choose_by_peak, segment_plans
from recompute_pass.solver.frontier import Relaxation, hull
from tests.support.full_size import full_only
from tests.support.harness import Step, assert_same_step, autograd_cache_off, run_step
from tests.support.joint_graphs import analyzed, capture_joints
from tests.support.scorers import FakeScorer

SEQ_MAX = 128  # the model's longest sequence (its RoPE tables)
LOW, HIGH, MULTIPLE = 16, SEQ_MAX, 8
FULL_ONLY = full_only("Inductor compiles at every cap; reduced by default to one")
CAPS = (400_000, 600_000)  # bytes; the step's lowest peak is 0.16 MB at n=16, 0.77 MB at 128


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Llama(LlamaConfig(seq=SEQ_MAX, dim=32, heads=4, hidden=88, layers=2))


def _inputs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(n)
    size = (2, n)
    return torch.randint(0, 128, size, generator=generator), torch.randint(0, 128, size, generator=generator)


@functools.cache
def _fit(cap: int) -> FitResult:
    return fit_longest(
        _model(), _inputs, cap, low=LOW, high=HIGH, multiple_of=MULTIPLE, backend=recompute_eager_backend
    )


def _compiled_step(backend: object, sizes: tuple[int, ...]) -> tuple[list[int], Step]:
    """One ``dynamic=True`` compile run at each size: the measured peaks, and the last
    step (loss, gradients, reports) for comparison with eager."""
    torch.compiler.reset()
    model = _model()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    peaks = []
    with capture_reports() as reports:
        for n in sizes:
            for p in model.parameters():
                p.grad = None
            args = _inputs(n)
            memory, loss = step_memory(
                lambda args=args: compiled(*args), lambda out: out.backward(), torch.device("cpu")
            )
            peaks.append(memory.peak_bytes)
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    return peaks, Step(loss.detach(), grads, 0, reports)


@pytest.mark.parametrize("cap", [CAPS[0], pytest.param(CAPS[1], marks=FULL_ONLY)])
def test_fitted_plan_runs_under_the_cap_with_eager_gradients(cap: int) -> None:
    fit = _fit(cap)
    (measured,), step = _compiled_step(fit.backend, (fit.size,))
    assert_same_step(step, run_step(_model(), _inputs(fit.size)))
    (report,) = step.reports
    assert report.predicted_peak_bytes == fit.predicted_peak_bytes  # the plan fit_longest chose
    # Without codegen the prediction is the allocator's figure, up to the step's loss scalar.
    assert measured <= cap + 64 and abs(measured - fit.predicted_peak_bytes) <= 64


def test_a_larger_cap_never_gives_a_shorter_size() -> None:
    sizes = [_fit(cap).size for cap in (*CAPS, 900_000)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


def test_one_compile_serves_every_size() -> None:
    fit = _fit(CAPS[0])
    # Planned for the fitted size whatever size the first call traced (24 here).
    sizes = sorted({24, 40, fit.size, HIGH})
    peaks, step = _compiled_step(fit.backend, tuple(sizes))
    assert len(step.reports) == 1  # one partition: no recompile per size
    assert step.reports[0].predicted_peak_bytes == fit.predicted_peak_bytes
    assert peaks == sorted(peaks) and len(set(peaks)) == len(sizes)  # one plan: the peak grows with n


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"memory_cap": 0}, "memory_cap"),
        ({"memory_cap": -5}, "memory_cap"),
        ({"memory_cap": 1.5e6}, "memory_cap"),
        ({"low": 64, "high": 32}, "low"),
        ({"low": 0}, "low"),
        ({"multiple_of": 0}, "multiple_of"),
        ({"low": 17, "high": 23, "multiple_of": 8}, "multiple_of"),
        ({"headroom": 0.5}, "headroom"),
        ({"headroom": -0.01}, "headroom"),
        ({"headroom": float("nan")}, "headroom"),
        ({"headroom": "1%"}, "headroom"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict[str, object], name: str) -> None:
    args: dict[str, object] = {"memory_cap": CAPS[0], "low": LOW, "high": HIGH, "multiple_of": MULTIPLE}
    args.update(kwargs)
    cap = args.pop("memory_cap")
    with pytest.raises(ValueError, match=name):
        fit_longest(_model(), _inputs, cap, backend=recompute_eager_backend, **args)  # type: ignore[arg-type]


def test_headroom_is_kept_free_of_the_cap() -> None:
    cap = CAPS[0]
    exact = _fit(cap)
    kept = fit_longest(
        _model(),
        _inputs,
        cap,
        low=LOW,
        high=HIGH,
        multiple_of=MULTIPLE,
        backend=recompute_eager_backend,
        headroom=0.2,
    )
    assert exact.headroom_bytes == 0 and kept.headroom_bytes == math.ceil(0.2 * cap)
    assert kept.predicted_peak_bytes <= 0.8 * cap < exact.predicted_peak_bytes
    assert kept.size < exact.size and kept.memory_cap == cap


def test_a_cap_below_the_smallest_sizes_peak_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"memory_cap=.*smallest size, low=16"):
        fit_longest(_model(), _inputs, 10_000, low=LOW, high=HIGH, backend=recompute_eager_backend)


@pytest.mark.parametrize(
    "value",
    [{"a": 0}, {"a": True}, {"": 3}, 5, [("a",)], [("a", 2), ("a", 3)]],
)
def test_plan_sizes_is_validated(value: object) -> None:
    with pytest.raises(ValueError, match="plan_sizes"):
        RecomputeOptions(plan_sizes=value)


def test_plan_sizes_has_one_spelling_and_enters_the_cache_key() -> None:
    by_dict = RecomputeOptions(plan_sizes={"b": 2, "a": 1})
    assert (
        by_dict.plan_sizes
        == (("a", 1), ("b", 2))
        == RecomputeOptions(plan_sizes=[("b", 2), ("a", 1)]).plan_sizes
    )
    assert by_dict.cache_key() == RecomputeOptions(plan_sizes=(("a", 1), ("b", 2))).cache_key()
    assert by_dict.cache_key() != RecomputeOptions(plan_sizes={"a": 1, "b": 3}).cache_key()
    assert by_dict.cache_key() != RecomputeOptions().cache_key()


@pytest.mark.parametrize("compiler", [None, "inductor"])
def test_planning_at_other_sizes_is_planning_a_trace_at_those_sizes(compiler: str | None) -> None:
    """A dynamic trace at batch 4 planned for batch 16 predicts what a dynamic trace at 16
    predicts: the override reaches the cost model, the peak walk and Inductor's memory plan."""
    torch.manual_seed(0)
    model = MLP(32, 64)
    source = "L['x'].size()[0]"

    def report(batch: int, plan: int | None) -> object:
        torch.manual_seed(1)
        (joint,) = capture_joints(model, (torch.randn(batch, 32),), dynamic=True)
        options = RecomputeOptions(fallback=False, memory_budget=0.5)
        if plan is not None:
            options = options.replace(plan_sizes={source: plan})
        _, _, result = partition(
            joint.copy(),
            num_fwd_outputs=joint.num_fwd_outputs,
            static_lifetime_input_indices=joint.static_lifetime_input_indices,
            options=options,
            compiler=compiler,
        )
        return result

    planned, traced, unplanned = report(4, 16), report(16, None), report(4, None)
    assert planned.predicted_peak_bytes == traced.predicted_peak_bytes != unplanned.predicted_peak_bytes
    assert planned.saved_bytes == traced.saved_bytes and planned.min_bytes == traced.min_bytes
    assert planned.to_text() == traced.to_text()


def _inductor_fit(layers: int, cap: int, high: int) -> None:
    """Through Inductor's memory plan: the fitted plan measured at the fitted size, gradients
    against eager at the smallest, one compile for both."""
    torch.manual_seed(0)
    model = Llama(LlamaConfig(seq=SEQ_MAX, dim=32, heads=4, hidden=88, layers=layers))
    fit = fit_longest(model, _inputs, cap, low=LOW, high=high, multiple_of=16, backend=recompute_backend)
    assert fit.predicted_peak_bytes <= cap
    torch.compiler.reset()
    compiled = torch.compile(model, backend=fit.backend, dynamic=True)
    with capture_reports() as reports, autograd_cache_off():
        # Traced at LOW, planned for fit.size: the plan's sizes reach Inductor's memory
        # plan inside the real compile, and no guard of theirs fails the next size.
        expected = run_step(model, _inputs(LOW), backend=None)  # eager reference on a copy
        loss = compiled(*_inputs(LOW))
        loss.backward()
        grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        memory, _ = step_memory(
            lambda: compiled(*_inputs(fit.size)), lambda out: out.backward(), torch.device("cpu")
        )
    assert len(reports) == 1 and reports[0].predicted_peak_bytes == fit.predicted_peak_bytes
    # Inductor's plan modelled under dynamic shapes (SymInts among the saved values), not
    # the graph walk's fallback.
    assert reports[0].peak_model == "inductor", reports[0].notes
    assert abs(memory.peak_bytes - fit.predicted_peak_bytes) <= 0.01 * memory.peak_bytes
    assert_same_step(Step(loss.detach(), grads, 0, []), expected)


def test_inductor_fit_runs_under_the_cap_with_eager_gradients() -> None:
    """Reduced: one layer, four sizes."""
    _inductor_fit(layers=1, cap=250_000, high=48)


@FULL_ONLY
@pytest.mark.parametrize("cap", CAPS)
def test_inductor_fit_two_layers(cap: int) -> None:
    _inductor_fit(layers=2, cap=cap, high=HIGH)


def test_a_cap_below_the_estimated_lowest_plan_checks_the_next_lowest() -> None:
    """The fast estimate ranks plans roughly: a cap under the exact peak of the plan it
    ranks lowest is feasible when another low-ranked plan's exact peak fits (each probe of
    ``fit_longest`` relies on this near its boundary)."""
    (joint,) = capture_joints(MLP(32, 64), (torch.randn(4, 32),))
    costed = build_problem(analyzed(joint), get_profile("cpu"))
    problem = costed.problem
    frontier = hull(Relaxation.of(problem), deadline=math.inf)
    plans = list(dict.fromkeys([*frontier, *segment_plans(problem)]))
    assert len(plans) >= 3
    ranked = sorted(plans, key=lambda p: p.cost(problem))
    estimate = {plan: 1000 - 10 * i for i, plan in enumerate(ranked)}  # costlier: lower estimate
    exact = dict(estimate)
    lowest = ranked[-1]
    exact[lowest] = 5000  # the estimate's lowest is in fact the highest
    cap = exact[ranked[-2]]
    scorer = FakeScorer(lambda p: estimate.get(p, 2000), lambda p: exact.get(p, 2000))
    choice = choose_by_peak(
        problem,
        frontier,
        scorer,
        ratio=None,
        cap=cap,
        deadline=math.inf,
    )
    assert exact.get(choice.plan, 2000) <= cap
    assert not any("infeasible" in note for note in choice.notes)


def test_inductor_prediction_does_not_depend_on_the_traced_size() -> None:
    """Probing size n from a trace at another size must plan what a trace at n does: the
    backward's inputs keep the forward's symbolic strides. Compared at the hints, a trace
    at another size saw them differ and the model fixed them, so Inductor fused the
    backward otherwise (nanoGPT at 432 tokens: 102.6 MB traced at 544, 99.3 MB traced at
    432 and measured; this small nanoGPT chose another plan)."""

    def gpt() -> torch.nn.Module:
        torch.manual_seed(0)
        return GPT(GPTConfig(vocab=128, seq=SEQ_MAX, dim=32, heads=4, layers=2))

    n = 64
    sized = SizedInputs.of(gpt(), _inputs, LOW, HIGH)
    options = recompute_backend.options().replace(memory_budget=0.0, fallback=False)
    plans = []
    for trace in (n, 96):  # symbols are named per trace: compare the plans by their figures
        captured = capture_step(gpt(), sized.args(trace), inductor=True)
        report = captured.partition(options.replace(plan_sizes=sized.plan_sizes(n, captured.shape_env())))
        assert report.peak_model == "inductor"
        plans.append((report.predicted_peak_bytes, report.saved_bytes, report.recompute_flops))
    assert plans[0] == plans[1]
