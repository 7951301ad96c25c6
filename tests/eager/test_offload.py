"""Offload end to end on this CPU: plans, rewritten graphs and gradients.

The host tier is ``tests/support/offload_standin.py``'s stand-in (the transfer is a copy; tests
only), with the CPU profile given a host link (``STANDIN_PROFILE``). Values must be at
least ``MIN_OFFLOAD_BYTES`` to be offloaded, hence a model wider than the other tests'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch
from torch import fx, nn

import recompute_pass.partitioner as partitioner
from benchmarks.harness.models import model_cases
from cost_model import calibrate
from recompute_pass import PartitionReport, RecomputeOptions, recompute_eager_backend
from recompute_pass import torch_internals as ti
from recompute_pass.graph.costing import resolve_device
from recompute_pass.offloading.schedule import offloadable
from tests.support.harness import assert_same_step, build, case_inputs, run_step
from tests.support.offload_standin import STANDIN_PROFILE, cpu_host_tier

CASE = model_cases(layers=1, dim=128, seq=64)["llama"]


@pytest.fixture(autouse=True)
def host_tier() -> Iterator[None]:
    with cpu_host_tier():
        yield


@pytest.fixture(scope="module")
def eager() -> object:
    return run_step(build(CASE), case_inputs(CASE))


def _backend(**options: object) -> object:
    settings = {"fallback": False, "offload": True, "device": STANDIN_PROFILE, **options}
    return recompute_eager_backend.with_options(**settings)


def _graphs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[fx.GraphModule, fx.GraphModule]]:
    """Records the forward and backward graphs each partition returns."""
    graphs: list[tuple[fx.GraphModule, fx.GraphModule]] = []
    real = partitioner.partition

    def recording(*args: object, **kwargs: object) -> tuple[fx.GraphModule, fx.GraphModule, PartitionReport]:
        forward, backward, report = real(*args, **kwargs)  # type: ignore[arg-type]
        graphs.append((forward, backward))
        return forward, backward, report

    monkeypatch.setattr(partitioner, "partition", recording)
    return graphs


def _check_ops_in_place(forward: fx.GraphModule, backward: fx.GraphModule, names: set[str]) -> None:
    """Forward: each offloaded value's offload after its last use, its wait after that;
    backward: each reload before its wait, the wait before the first use."""
    order = {n: k for k, n in enumerate(forward.graph.nodes)}
    offloads = forward.graph.find_nodes(op="call_function", target=ti.ao_offload)
    assert {n.args[0].name for n in offloads} == names
    for node in offloads:
        source = node.args[0]
        (wait,) = node.users
        assert wait.target is ti.ao_wait_tensor and order[wait] > order[node]
        others = [u for u in source.users if u not in (node, wait)]
        assert all(order[u] < order[node] for u in others), source.name
    order = {n: k for k, n in enumerate(backward.graph.nodes)}
    reloads = backward.graph.find_nodes(op="call_function", target=ti.ao_reload)
    assert len(reloads) == len(names)
    for node in reloads:
        (wait,) = node.users
        assert wait.target is ti.ao_wait_tensor and order[wait] > order[node]
        assert all(order[u] > order[wait] for u in wait.users)
        assert node.args[0].op == "placeholder" and set(node.args[0].users) == {node, wait}


@pytest.mark.parametrize(("solver", "budget"), [("milp", 1.0), ("milp", 0.5), ("milp", 0.0), ("mincut", 0.0)])
def test_gradients_equal_eager_and_windows_hold(
    solver: str, budget: float, eager: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    graphs = _graphs(monkeypatch)
    step = run_step(build(CASE), case_inputs(CASE), backend=_backend(solver=solver, memory_budget=budget))
    assert_same_step(step, eager)  # type: ignore[arg-type]
    (report,) = step.reports
    assert report.solver == "peak+offload" and report.offloaded, report.to_text()
    # The solver's windows hold in the graphs as extracted: every transfer hidden.
    assert all(o.exposed_seconds == 0.0 and o.hidden_seconds > 0 for o in report.offloaded)
    assert f"offloaded: {sum(o.bytes for o in report.offloaded):,} B" in report.to_text()
    assert report.offload_frontier and "frontier with offload" in report.to_text()
    ((forward, backward),) = graphs
    saved = {s.name for s in report.saved}
    assert {o.name for o in report.offloaded} <= saved
    assert len(forward.graph.find_nodes(op="call_function", target=ti.ao_offload)) == len(report.offloaded)
    assert len(backward.graph.find_nodes(op="call_function", target=ti.ao_reload)) == len(report.offloaded)


def test_offload_lowers_the_peak_at_the_same_cost(eager: object) -> None:
    """At budget 1 (the fastest plan's peak) the plan with offload recomputes no more and
    peaks lower than the one without; at budget 0, the range's low end is lower too."""
    plain = run_step(build(CASE), case_inputs(CASE), backend=_backend(offload=False)).reports[0]
    offload = run_step(build(CASE), case_inputs(CASE), backend=_backend()).reports[0]
    assert offload.estimated_step_overhead <= plain.estimated_step_overhead * (1 + 1e-9)
    assert offload.predicted_peak_bytes < plain.predicted_peak_bytes
    assert not plain.offloaded and plain.solver == "peak"
    plain, offload = (
        run_step(build(CASE), case_inputs(CASE), backend=_backend(memory_budget=0.0, offload=on)).reports[0]
        for on in (False, True)
    )
    assert offload.min_bytes < plain.min_bytes


@pytest.mark.parametrize("budget", [1.0, 0.0])
def test_forced_offload_of_every_value_keeps_gradients(
    budget: float, eager: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every saved value that may be offloaded is, whatever the windows say: the rewritten
    graphs still give eager's gradients, the ops stand where they must, and the
    predicted peak (offloaded bytes off the device) is below the same plan's without."""
    real_decide = partitioner.decide
    forced: list[set[str]] = []

    def decide(problem, options, *args, **kwargs):  # type: ignore[no-untyped-def]
        decision = real_decide(problem, options.replace(offload=False), *args)
        saved = decision.plan.saved - {i for i in decision.plan.saved if i not in chosen}
        plan = dataclasses.replace(decision.plan, offloaded=frozenset(saved))
        forced.append({problem.items[i].name for i in saved})
        return dataclasses.replace(decision, plan=plan)

    real_build = partitioner.build_problem
    chosen: set[int] = set()

    def build_problem(*args, **kwargs):  # type: ignore[no-untyped-def]
        costed = real_build(*args, **kwargs)
        chosen.clear()
        chosen.update(offloadable(costed))
        return costed

    monkeypatch.setattr(partitioner, "build_problem", build_problem)
    plain = _backend(memory_budget=budget, offload=False)
    without = run_step(build(CASE), case_inputs(CASE), backend=plain).reports[0]
    monkeypatch.setattr(partitioner, "decide", decide)
    graphs = _graphs(monkeypatch)
    step = run_step(build(CASE), case_inputs(CASE), backend=_backend(memory_budget=budget))
    assert_same_step(step, eager)  # type: ignore[arg-type]
    ((forward, backward),) = graphs
    (names,) = forced
    assert len(names) >= 2
    _check_ops_in_place(forward, backward, names)
    (report,) = step.reports
    assert {o.name for o in report.offloaded} and len(report.offloaded) == len(names)

    # The same plan but for the offloads: as backward starts, the offloaded values are off
    # the device (all of them here; a reload prefetched before the first node would be
    # back), and the peak is no higher.
    def boundary(r: PartitionReport) -> int:
        return next(live for phase, _, live in r.peak_timeline if phase == "backward")

    offloaded = sum(o.bytes for o in report.offloaded)
    assert boundary(without) - boundary(report) == offloaded
    assert report.predicted_peak_bytes <= without.predicted_peak_bytes


def test_host_cap_is_never_exceeded(eager: object) -> None:
    cap = 400_000
    step = run_step(
        build(CASE), case_inputs(CASE), backend=_backend(memory_budget=0.0, offload_host_bytes=cap)
    )
    assert_same_step(step, eager)  # type: ignore[arg-type]
    (report,) = step.reports
    assert 0 < sum(o.bytes for o in report.offloaded) <= cap


class _Noisy(nn.Module):
    """A random mask backward needs, drawn early: compute after it hides its transfers."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(128, 512), nn.Linear(512, 128)
        self.rest = nn.Sequential(
            *(nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 128)) for _ in range(3))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.up(x)
        mask = torch.rand_like(hidden)
        return self.rest(self.down(torch.relu(hidden) * mask)).square().mean()


def test_random_values_are_offloaded_never_redrawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """A draw that cannot be replayed (as from an explicit generator) is saved, never
    recomputed; it may be offloaded like any saved value."""
    monkeypatch.setattr(ti, "replayable_rng_state_bytes", lambda node: None)
    graphs = _graphs(monkeypatch)
    torch.manual_seed(0)
    model, x = _Noisy(), torch.randn(256, 128)
    expected = run_step(model, (x,))
    step = run_step(model, (x,), backend=_backend(memory_budget=0.0, time_limit=5.0))
    assert_same_step(step, expected)
    (report,) = step.reports
    ((forward, backward),) = graphs
    offloaded = {n.args[0] for n in forward.graph.find_nodes(op="call_function", target=ti.ao_offload)}
    assert [n for n in offloaded if n.target is torch.ops.aten.rand.default], report.to_text()
    assert not backward.graph.find_nodes(op="call_function", target=torch.ops.aten.rand.default)


def test_without_a_host_link_nothing_is_offloaded() -> None:
    step = run_step(build(CASE), case_inputs(CASE), backend=_backend(device="cpu"))
    (report,) = step.reports
    assert not report.offloaded and any("no host link" in note for note in report.notes)


def test_calibrate_measures_no_host_link_on_cpu() -> None:
    profile = calibrate("cpu", size=32, repeats=1, copy_bytes=1 << 16, dtypes=[torch.float32])
    assert profile.device_to_host_bandwidth is None and not profile.has_host_link


def test_options() -> None:
    assert RecomputeOptions().offload is False  # off until measured on a GPU
    on = RecomputeOptions(offload=True, offload_host_bytes=1 << 30)
    assert on.cache_key() != RecomputeOptions(offload=True).cache_key() != RecomputeOptions().cache_key()
    for bad, match in [
        ({"offload": 1}, "offload=1"),
        ({"offload": True, "budget_mode": "saved"}, "peak"),
        ({"offload": True, "memory_budget_bytes": 10}, "peak"),
        ({"offload": True, "solver": "selective"}, "milp or mincut"),
        ({"offload_host_bytes": -1}, "offload_host_bytes"),
    ]:
        with pytest.raises(ValueError, match=match):
            RecomputeOptions(**bad)  # type: ignore[arg-type]


def test_gh200_is_detected_before_h200(monkeypatch: pytest.MonkeyPatch) -> None:
    class OnCuda(torch.Tensor):
        @property
        def device(self) -> torch.device:  # type: ignore[override]
            return torch.device("cuda", 0)

    graph = fx.Graph()
    graph.placeholder("x").meta["val"] = torch.Tensor._make_subclass(OnCuda, torch.empty(1))
    graph.output(())
    joint = type("Joint", (), {"module": fx.GraphModule({}, graph)})()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for gpu, name in [("NVIDIA GH200 480GB", "gh200"), ("NVIDIA H200", "h200"), ("NVIDIA H100 PCIe", "h100")]:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device, gpu=gpu: gpu)
        profile = resolve_device("auto", joint)  # type: ignore[arg-type]
        assert profile.name == name and profile.has_host_link
