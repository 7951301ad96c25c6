"""``device="measure"``: op times from the clock, cached on disk, with the roofline as fallback.

Most tests replace the device calibration (about a second) with a fixed profile and, where
the values themselves do not matter, the timing with a deterministic stand-in, so the file
runs in seconds; the cross-process test times for real.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import fx

import cost_model.measure as measure_mod
from cost_model import (
    DeviceProfile,
    OpKind,
    SizeHints,
    estimate_runtime,
    get_profile,
    measure_op_times,
    node_cost,
)
from recompute_pass import RecomputeOptions
from recompute_pass.capture import CapturedStep
from recompute_pass.graph.costing import build_problem, fuses, measure
from recompute_pass.partitioner import partition
from tests.support.joint_graphs import analyzed, reference_joints

ROOT = Path(__file__).resolve().parents[2]
CPU = get_profile("cpu")
TEST_PROFILE = DeviceProfile("calibrated-test", {torch.float32: 2e11}, 2e10, 3e-6)


@pytest.fixture(autouse=True)
def quick_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure_mod, "_calibrate", lambda device: TEST_PROFILE)


def stand_in(seconds: Callable[[fx.Node], float] = lambda n: 1e-6 * len(str(n.target))):
    """A timing function with known answers (and a counter of the ops it timed)."""
    calls: list[str] = []

    def fake(node: fx.Node, hints: SizeHints, *, fused: bool, repeats: int, deadline: float) -> float:
        calls.append(str(node.target))
        return seconds(node) / (10 if fused else 1)

    fake.calls = calls  # type: ignore[attr-defined]
    return fake


def joint_of(name: str) -> tuple[CapturedStep, object]:
    (captured,) = reference_joints(name)
    return captured, analyzed(captured)


def partition_report(name: str, compiler: str | None = None, **options: object):
    (captured,) = reference_joints(name)
    *_, report = partition(
        captured.copy(),
        num_fwd_outputs=captured.num_fwd_outputs,
        static_lifetime_input_indices=captured.static_lifetime_input_indices,
        options=RecomputeOptions(**options),
        compiler=compiler,
    )
    return report


# -- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "valid"),
    [
        ("device", "measured", "measure"),
        ("device", "MEASURE", "measure"),
        ("profile_time_limit", -1, ">= 0"),
        ("profile_time_limit", math.nan, ">= 0"),
        ("profile_time_limit", math.inf, ">= 0"),
        ("profile_time_limit", "10", ">= 0"),
        ("profile_time_limit", True, ">= 0"),
        ("profile_cache_dir", "", "directory path"),
        ("profile_cache_dir", 3, "directory path"),
        ("profile_cache_dir", b"/tmp", "directory path"),
    ],
    ids=repr,
)
def test_bad_option_values_raise_naming_the_option(option: str, value: object, valid: str) -> None:
    with pytest.raises(ValueError, match=f"invalid {option}=") as info:
        RecomputeOptions(**{option: value})
    assert valid in str(info.value)


def test_measure_options_are_accepted_normalised_and_keyed(tmp_path: Path) -> None:
    options = RecomputeOptions(device="measure", profile_time_limit=0, profile_cache_dir=tmp_path)
    assert options.profile_time_limit == 0.0 and type(options.profile_time_limit) is float
    assert options.profile_cache_dir == str(tmp_path)  # one spelling: a path or its string
    assert options == RecomputeOptions(
        device="measure", profile_time_limit=0.0, profile_cache_dir=str(tmp_path)
    )
    keys = {
        RecomputeOptions().cache_key(),
        RecomputeOptions(device="measure").cache_key(),
        RecomputeOptions(device="measure", profile_time_limit=1).cache_key(),
        options.cache_key(),
    }
    assert len(keys) == 4
    with pytest.raises(ValueError, match="time_limit"):
        measure_op_times([], SizeHints.static(), CPU, time_limit=-1)


# -- the cache -------------------------------------------------------------------------------


def test_miss_then_hit_and_the_file_is_keyed_by_device_and_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = stand_in()
    monkeypatch.setattr(measure_mod, "_measure", fake)
    _, joint = joint_of("gpt_block")
    cold = measure(joint, compiler=None, cache_dir=str(tmp_path), time_limit=10)
    stats = cold.times.stats
    assert stats.measured == stats.distinct > 5 and stats.cached == 0 and stats.calibrated
    assert len(fake.calls) == stats.distinct  # each distinct signature timed once
    assert stats.nodes > stats.distinct  # repeated ops (several adds of one shape) share a timing
    (path,) = (tmp_path / "op_times").iterdir()
    cpu = torch.device("cpu")
    assert path == measure_mod.cache_file(cpu, tmp_path) and torch.__version__ in path.name
    stored = json.loads(path.read_text())
    assert stored["device"] == measure_mod.device_name(cpu) and stored["torch"] == torch.__version__
    assert f"x{torch.get_num_threads()} threads" in stored["device"]  # timings depend on threads
    assert stored["profile"]["memory_bandwidth"] == TEST_PROFILE.memory_bandwidth

    warm = measure(joint, compiler=None, cache_dir=str(tmp_path), time_limit=10)
    assert warm.times.stats.cached == stats.distinct and warm.times.stats.measured == 0
    assert len(fake.calls) == stats.distinct  # nothing timed again
    assert not warm.times.stats.calibrated and warm.times.profile == TEST_PROFILE
    assert dict(warm.times.seconds) == dict(cold.times.seconds)

    # Fused pricing (under Inductor) is another quantity, so another key: misses for pointwise ops.
    fused = measure(joint, compiler="inductor", cache_dir=str(tmp_path), time_limit=10)
    signatures = _signatures(joint, fused=True)
    pointwise = {signatures[c.node] for c in timed(joint) if fuses(c.node)}
    assert fused.times.stats.measured == len(pointwise) > 0


def test_signature_has_op_shapes_strides_dtype_and_mode() -> None:
    graph = fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(4, 8)
    y = graph.placeholder("y")
    y.meta["val"] = torch.empty(8, 4).t()
    add = graph.call_function(torch.ops.aten.add.Tensor, (x, y))
    add.meta["val"] = torch.empty(4, 8)
    sig = measure_mod.signature(add, SizeHints.static())
    assert sig == "kernel:aten.add.Tensor(float32[4,8]/[8,1]@cpu, float32[4,8]/[1,4]@cpu)"
    assert measure_mod.signature(add, SizeHints.static(), fused=True).startswith("fused:")
    view = graph.call_function(torch.ops.aten.view.default, (x, [32]))
    with pytest.raises(measure_mod.Unmeasurable):
        measure_mod.signature(view, SizeHints.static())


def test_cache_dir_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(measure_mod.CACHE_ENV, str(tmp_path / "env"))
    assert measure_mod.default_cache_dir() == tmp_path / "env"
    assert measure_mod.cache_file(torch.device("cpu")).parent == tmp_path / "env" / "op_times"
    monkeypatch.delenv(measure_mod.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert measure_mod.default_cache_dir() == tmp_path / "xdg" / "torch_recompute"


def test_entries_already_on_disk_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes timing the same op at once: the first written is what both then use."""
    monkeypatch.setattr(measure_mod, "_measure", stand_in(lambda n: 1.0))
    _, joint = joint_of("mlp")
    first = measure(joint, compiler=None, cache_dir=str(tmp_path), time_limit=10).times
    reads = measure_mod._read
    calls = []

    def stale_once(path: Path) -> dict:  # the second process read the cache before the first wrote
        calls.append(path)
        return {} if len(calls) == 1 else reads(path)

    monkeypatch.setattr(measure_mod, "_read", stale_once)
    monkeypatch.setattr(measure_mod, "_measure", stand_in(lambda n: 2.0))
    second = measure(joint, compiler=None, cache_dir=str(tmp_path), time_limit=10).times
    assert second.stats.measured == first.stats.measured  # it timed them itself...
    assert set(second.seconds.values()) == {1.0}  # ...but uses what the first wrote
    assert set(json.loads(first.cache_file.read_text())["times"].values()) == {1.0}


# -- time limit and fallback -----------------------------------------------------------------


def test_time_limit_times_the_most_expensive_first_and_leaves_the_rest_to_the_roofline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def slow(node: fx.Node, hints: SizeHints, **kwargs: object) -> float:
        time.sleep(0.05)
        return 1.0

    monkeypatch.setattr(measure_mod, "_measure", slow)
    _, joint = joint_of("gpt_block")
    nodes = [c.node for c in joint.candidates if c.node.op == "call_function" and c.can_recompute]
    hints = SizeHints.from_graph(joint.module)
    with caplog.at_level(logging.WARNING, logger="cost_model"):
        times = measure_op_times(nodes, hints, CPU, cache_dir=tmp_path, time_limit=0.12)
    stats = times.stats
    assert 1 <= stats.measured <= 4 and stats.timed_out == stats.distinct - stats.measured > 0
    assert any("time limit" in r.getMessage() for r in caplog.records)
    # The measured ones are the priciest by the roofline.
    sigs = _signatures(joint)
    by_estimate = sorted(
        {sigs[n]: estimate_runtime(node_cost(n), CPU, hints) for n in nodes if n in sigs}.items(),
        key=lambda kv: (-kv[1], kv[0]),
    )
    measured = {sigs[n] for n in times.seconds}
    assert measured == {sig for sig, _ in by_estimate[: len(measured)]}

    # The next compile times what the limit left.
    rest = measure_op_times(nodes, hints, CPU, cache_dir=tmp_path, time_limit=10)
    assert rest.stats.measured == stats.timed_out and set(rest.seconds) >= set(times.seconds)


def test_zero_limit_and_empty_cache_is_the_roofline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing timed, nothing calibrated: under Inductor the plan is the roofline's."""
    monkeypatch.setattr(measure_mod, "_calibrate", lambda device: pytest.fail("calibrated at limit 0"))
    monkeypatch.setattr(measure_mod, "_measure", lambda *a, **k: pytest.fail("timed at limit 0"))
    for budget in (0.0, 0.5):
        measured = partition_report(
            "gpt_block",
            "inductor",
            device="measure",
            memory_budget=budget,
            profile_time_limit=0,
            profile_cache_dir=str(tmp_path),
        )
        roofline = partition_report("gpt_block", "inductor", device="auto", memory_budget=budget)
        assert measured.to_text() == roofline.to_text()
    assert not (tmp_path / "op_times").exists()


def test_failed_and_untimed_ops_fall_back_to_the_roofline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def flaky(node: fx.Node, hints: SizeHints, *, fused: bool, **kwargs: object) -> float:
        if "mul" in str(node.target):
            raise RuntimeError("cannot run on made-up inputs")
        return 1e-3

    monkeypatch.setattr(measure_mod, "_measure", flaky)
    _, joint = joint_of("gpt_block")
    measured = measure(joint, compiler=None, cache_dir=str(tmp_path), time_limit=10)
    stats = measured.times.stats
    assert stats.failed > 0 and stats.measured == stats.distinct - stats.failed
    costed = build_problem(joint, measured.times.profile, measured)
    fell_back = 0
    for candidate, item in zip(joint.candidates, costed.problem.items, strict=False):
        if candidate not in timed(joint):
            continue
        if candidate.node in measured.times.seconds:
            assert item.recompute_cost == 1e-3  # the clock replaces the estimate
        else:  # no codegen: the roofline's kernel estimate, under the calibrated profile
            roofline = estimate_runtime(candidate.cost, TEST_PROFILE, costed.hints, fused=False)
            assert item.recompute_cost == roofline > 0
            fell_back += 1
    assert fell_back > 0
    again = measure(joint, compiler=None, cache_dir=str(tmp_path), time_limit=10).times.stats
    assert again.measured == 0 and again.failed == stats.failed  # failures are cached too


def test_under_inductor_pointwise_ops_are_priced_fused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(measure_mod, "_measure", stand_in(lambda n: 1e-3))
    _, joint = joint_of("gpt_block")
    measured = measure(joint, compiler="inductor", cache_dir=str(tmp_path), time_limit=10)
    costed = build_problem(joint, measured.times.profile, measured)
    fused = 0
    for candidate, item in zip(joint.candidates, costed.problem.items, strict=False):
        if candidate not in timed(joint) or not candidate.forward:
            continue
        if fuses(candidate.node):  # its arithmetic, plus a write if a matmul reads it
            users = joint.backward_users.get(candidate.node, ())
            write = not all(fuses(u) for u in users)
            out = candidate.cost.evaluate(costed.hints).bytes_out / TEST_PROFILE.memory_bandwidth
            assert item.recompute_cost == pytest.approx(1e-4 + (out if write else 0.0))
            fused += 1
        else:
            assert item.recompute_cost == 1e-3
        if candidate.can_save and item.size:  # saving: the read, at the calibrated bandwidth
            assert item.save_cost == item.size / TEST_PROFILE.memory_bandwidth
    assert fused > 0


def test_an_op_costs_its_fastest_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slower round was disturbed (another process, a page fault): the median of a few
    rounds moved several-fold between runs on a shared machine, the fastest one did not."""
    now = [0.0]
    per_call = iter([1e-3, 1e-3, 5e-3, 1e-3, 3e-3, 2e-3, 4e-3])  # two warm-up calls, then rounds

    def call() -> None:
        now[0] += next(per_call)

    clock = type("Clock", (), {"perf_counter": staticmethod(lambda: now[0])})
    monkeypatch.setattr(measure_mod, "time", clock)
    seconds = measure_mod._per_call(call, lambda: None, repeats=5, deadline=1.0)
    assert seconds == 1e-3  # the median would be 3e-3


# -- real timing -----------------------------------------------------------------------------


def test_real_timings_are_positive_and_leave_the_generator_alone(tmp_path: Path) -> None:
    _, joint = joint_of("gpt_block")
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    measured = measure(joint, compiler="inductor", cache_dir=str(tmp_path), time_limit=10)
    assert torch.equal(torch.rand(4), expected)  # profiling drew nothing from the caller's generator
    stats = measured.times.stats
    assert stats.measured > 5 and stats.failed == 0 and stats.timed_out == 0
    assert all(s >= 0 and math.isfinite(s) for s in measured.times.seconds.values())
    kernels = [s for n, s in measured.times.seconds.items() if not fuses(n)]
    assert kernels and min(kernels) > 0


DETERMINISM_SCRIPT = textwrap.dedent(
    """
    import json, torch
    from benchmarks.harness.models import model_cases
    from recompute_pass import capture_reports, recompute_eager_backend

    case = model_cases(layers=1, dim=32, seq=16)["gpt_block"]
    torch.manual_seed(0)
    model = case.build()
    torch.manual_seed(1)
    backend = recompute_eager_backend.with_options(device="measure", memory_budget=0.3, fallback=False)
    with capture_reports() as reports:
        torch.compile(model, backend=backend)(*case.inputs(2)).backward()
    (report,) = reports
    print(json.dumps({"text": report.to_text(), "overhead": report.estimated_step_overhead}))
    """
)


def test_two_processes_sharing_a_cache_make_the_same_plan(tmp_path: Path) -> None:
    env = {**os.environ, measure_mod.CACHE_ENV: str(tmp_path), "PYTHONPATH": str(ROOT)}

    def run() -> dict:
        done = subprocess.run(
            [sys.executable, "-c", DETERMINISM_SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold = run()
    (path,) = (tmp_path / "op_times").iterdir()
    written = path.read_bytes()
    warm = run()
    assert path.read_bytes() == written  # the second process timed nothing
    assert warm == cold
    assert "device: calibrated-cpu" in cold["text"]


def timed(joint: object) -> list[object]:
    """The candidates ``costing.measure`` times."""
    return [
        c
        for c in joint.candidates  # type: ignore[attr-defined]
        if c.cost.kind not in (OpKind.VIEW, OpKind.NONE) and (c.can_recompute or not c.forward)
    ]


def _signatures(joint: object, fused: bool = False) -> dict[fx.Node, str]:
    hints = SizeHints.from_graph(joint.module)  # type: ignore[attr-defined]
    out = {}
    for candidate in joint.candidates:  # type: ignore[attr-defined]
        with contextlib.suppress(measure_mod.Unmeasurable):
            out[candidate.node] = measure_mod.signature(candidate.node, hints, fused=fused)
    return out


# -- the accuracy report ---------------------------------------------------------------------


def test_accuracy_report_tables_targets_and_plot(tmp_path: Path) -> None:
    from benchmarks.cost_accuracy.accuracy_records import FusionRecord, OpError, PlanRecord, ProfilingTime
    from benchmarks.cost_accuracy.accuracy_report import plot, targets, verdict, write_results

    def plan(
        costs: str, budget: float, step: float, est: float, *, at_bytes: bool = False, name: str = ""
    ) -> PlanRecord:
        base = 0.100 if costs == "roofline" else 0.098
        return PlanRecord(
            model="gpt",
            costs=costs,
            budget=budget,
            at_bytes=at_bytes,
            budget_bytes=1000 if at_bytes else None,
            saved_bytes=1000,
            graph_saved_bytes=1000,
            recompute_flops=10,
            est_overhead=est,
            plan=name or f"{costs}{budget}",
            step_seconds=step,
            step_iqr=0.001,
            grads_ok=True,
            est_delta=None if at_bytes else est - (0.001 if costs == "roofline" else 0.010),
            delta=step - base,
            delta_iqr=0.002,
            vs_roofline=(step - 0.150) if at_bytes else None,
            vs_roofline_iqr=0.002 if at_bytes else None,
            faults_per_step=1234.0 if budget == 1.0 else 0.0,
            system_delta=0.0 if budget == 1.0 else -0.0025,
        )

    plans = [
        plan("roofline", 1.0, 0.100, 0.001),
        plan("roofline", 0.0, 0.150, 0.004),  # overhead 50 ms, estimated 3 ms: -94%
        plan("measured", 1.0, 0.098, 0.010),
        plan("measured", 0.0, 0.148, 0.055),  # overhead 50 ms, estimated 45 ms: -10%
        plan("measured", 0.0, 0.140, 0.050, at_bytes=True),  # 10 ms faster than the roofline plan
    ]
    timing = ProfilingTime(12, 2800, 748, 79, 1.5, 0.05, 79, 0)
    rows = targets(plans, timing, rounds=30)
    assert [status for _, status, _ in rows] == ["met", "met", "met"]
    assert "1 of 1" in rows[0][2] and "1 faster (gpt b=0)" in rows[1][2]
    assert verdict(plans, plans[-1], rounds=30) == "faster"
    errors = [OpError("gpt", "aten::mul[(8, 128)]", "pointwise", 2, 1e-5, 9e-5, 1e-4)]
    fusion = [FusionRecord("gelu", 1024, 2e-5, 1e-6, 3e-5, 1e-7)]
    meta = {
        "command": "python -m benchmarks.cost_accuracy",
        "machine": {"cpu": "test", "cpu_count": 2, "torch": torch.__version__},
        "threads": 1,
        "size": "full",
        "rounds": 2,
        "per_round": 3,
        "started": "now",
        "wall_minutes": 1.0,
        "load_average": [None, None],
        "git": {"head": "abc", "dirty": False},
        "code_hash": "0" * 12,
    }
    text = write_results(meta, plans, errors, fusion, timing, tmp_path / "RESULTS.md").read_text()
    assert "Command: `python -m benchmarks.cost_accuracy`" in text and "| gpt | 0 | measured |" in text
    assert "| -10% | 0 | -2.50 ms |" in text  # page faults and system time beside the estimate
    assert "| 10.00 ms | 1,234 |" in text  # the budget-1.0 plan's faults
    assert plot(plans, errors, tmp_path / "plot.png").stat().st_size > 0
    noisy = dataclasses.replace(plans[-1], vs_roofline_iqr=0.1)  # a 10 ms difference, 100 ms IQR
    assert verdict(plans, noisy, rounds=30) == "equal (within noise)"
