"""End to end on the fast path (our partitioner, graphs run without Inductor codegen)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from torch import fx

import recompute_pass.partitioner as partitioner_module
from benchmarks.harness.models import model_cases
from recompute_pass import capture_reports, recompute_eager_backend
from recompute_pass import torch_internals as ti
from recompute_pass.graph.costing import resolve_device
from tests.support.harness import assert_same_step, build, case_inputs, run_step

CASES = model_cases()
MODELS = ["mlp", "gpt_block", "llama_block", "cnn"]
BUDGETS = [1.0, 0.75, 0.5, 0.25, 0.0]


pytestmark = pytest.mark.usefixtures("fallback_random")  # conftest: compiled dropout draws eager's masks


@pytest.fixture(scope="module")
def eager_steps():
    return {name: run_step(build(CASES[name]), case_inputs(CASES[name])) for name in MODELS}


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", MODELS)
def test_gradients_match_eager_and_budget_holds(name: str, budget: float, eager_steps) -> None:
    case = CASES[name]
    backend = recompute_eager_backend.with_options(memory_budget=budget, budget_mode="saved", fallback=False)
    step = run_step(build(case), case_inputs(case), backend=backend)
    assert_same_step(step, eager_steps[name])
    (report,) = step.reports
    assert report.fallback is None
    assert report.within_budget
    assert report.budget_bytes == report.min_bytes + int((report.max_bytes - report.min_bytes) * budget)
    # What autograd really holds is what the report says was saved.
    assert step.saved_bytes == report.saved_bytes


@pytest.mark.parametrize("name", MODELS)
def test_budget_extremes_order_the_plans(name: str) -> None:
    case = CASES[name]
    reports = {}
    for budget in (0.0, 1.0):
        options = {"memory_budget": budget, "budget_mode": "saved", "fallback": False}
        backend = recompute_eager_backend.with_options(**options)
        (reports[budget],) = run_step(build(case), case_inputs(case), backend=backend).reports
    assert reports[0.0].saved_bytes == reports[0.0].min_bytes
    assert reports[1.0].saved_bytes == reports[1.0].max_bytes  # the fastest plan's bytes
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
    # Saved-bytes budgets run the solver asked for; peak budgets search plans by peak.
    options = {"solver": solver, "memory_budget": 0.5, "budget_mode": "saved", "fallback": False}
    step = run_step(build(case), case_inputs(case), backend=recompute_eager_backend.with_options(**options))
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


def test_fallback_gets_the_callers_arguments_and_reports_no_numbers(monkeypatch, eager_steps) -> None:
    """AOTAutograd (the eager backend) passes no ``compiler``: PyTorch's partitioner must
    not be told it is Inductor's. The report knows no bytes, FLOPs or times: None, not -1."""
    calls: list[dict] = []
    real = ti.min_cut_rematerialization_partition

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(partitioner_module, "decide", broken)
    monkeypatch.setattr(ti, "min_cut_rematerialization_partition", spy)
    case = CASES["mlp"]
    step = run_step(build(case), case_inputs(case), backend=recompute_eager_backend)
    assert_same_step(step, eager_steps["mlp"])
    (kwargs,) = calls
    assert "compiler" not in kwargs and "num_fwd_outputs" in kwargs
    (report,) = step.reports
    cause = "RuntimeError: boom"
    numbers = ("budget_bytes", "saved_bytes", "min_bytes", "max_bytes", "recompute_flops")
    numbers += ("estimated_recompute_time", "estimated_step_overhead")
    assert all(getattr(report, field) is None for field in numbers)
    assert report.to_text() == report.summary()
    assert report.summary() == f"recompute_pass: fell back to PyTorch's partitioner: {cause}"
    data = json.loads(report.to_json())
    assert all(data[field] is None for field in numbers) and data["fallback"] == cause


def test_unknown_gpu_is_costed_as_a_named_profile_with_one_warning(monkeypatch, caplog) -> None:
    class OnCuda(torch.Tensor):
        """A CPU tensor that says it lives on a GPU: all ``resolve_device`` reads."""

        @property
        def device(self) -> torch.device:
            return torch.device("cuda", 0)

    graph = fx.Graph()
    graph.placeholder("x").meta["val"] = torch.Tensor._make_subclass(OnCuda, torch.empty(1))
    graph.output(())
    joint = SimpleNamespace(module=fx.GraphModule({}, graph))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    unknown = "Imaginary GPU 9000"
    for gpu, profile in [("NVIDIA H200", "h200"), (unknown, "h100"), (unknown, "h100")]:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device, gpu=gpu: gpu)
        with caplog.at_level("WARNING", logger="recompute_pass"):
            assert resolve_device("auto", joint).name == profile
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and repr(unknown) in warnings[0] and "h100" in warnings[0]


def test_fallback_off_raises(monkeypatch) -> None:
    import recompute_pass.partitioner as partitioner

    monkeypatch.setattr(partitioner, "decide", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    case = CASES["mlp"]
    backend = recompute_eager_backend.with_options(fallback=False)
    with pytest.raises(Exception, match="boom"):
        run_step(build(case), case_inputs(case), backend=backend)


def test_dropout_masks_match_eager_at_budget_zero(eager_steps) -> None:
    """PyTorch 2.13's own budget partitioner redraws dropout masks here (README, "Behaviour
    worth knowing": randomness); ours replays them from saved generator state."""
    case = CASES["gpt_block"]
    # Saved-bytes budget 0: every mask is rebuilt (the lowest peak may keep some).
    backend = recompute_eager_backend.with_options(memory_budget=0.0, budget_mode="saved", fallback=False)
    step = run_step(build(case), case_inputs(case), backend=backend)
    assert_same_step(step, eager_steps["gpt_block"])
    report = step.reports[0]
    draws = sorted(r.name for r in report.recomputed if r.op in {"native_dropout", "rand", "bernoulli"})
    states = sorted(s.name.removesuffix("/rng_state") for s in report.saved if s.op == "rng_state")
    dropouts = sum(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in build(case).modules())
    assert len(draws) == dropouts > 0 and draws == states  # every mask replayed from its state
    assert not [s for s in report.saved if "native_dropout[" in s.name]  # no mask held


@pytest.mark.parametrize(("dtype", "noted"), [(torch.bfloat16, True), (torch.float32, False)])
def test_a_reduced_precision_cpu_matmul_workspace_is_said_to_be_left_out(dtype, noted, caplog) -> None:
    """oneDNN packs a bfloat16 matmul's operands into a workspace no prediction sizes
    (-14.5% on a 4-layer HF Llama in bfloat16): the report says so, and a warning too."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16)).to(dtype)
    backend = recompute_eager_backend.with_options(memory_budget=0.5, fallback=False)
    partitioner_module._warn_once.cache_clear()  # warned once per process
    with capture_reports() as reports, caplog.at_level("WARNING", logger="recompute_pass"):
        torch.compile(model, backend=backend)(torch.randn(4, 16, dtype=dtype)).sum().backward()
    (report,) = reports
    said = [note for note in report.notes if "reduced-precision CPU matmul" in note]
    assert bool(said) is noted
    if noted:
        assert "aten.mm.default" in said[0]
        assert any("reduced-precision CPU matmul" in r.getMessage() for r in caplog.records)
