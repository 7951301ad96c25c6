"""The benchmark's measurements, on tiny configurations (no Inductor codegen unless slow)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from benchmarks.frontier import _resolve, plan_configs, run_worker
from benchmarks.frontier.frontier_report import write_report
from benchmarks.frontier.worker import measure_config as measure
from benchmarks.harness.analysis import compare_frontier, fits, held, megatron_point, targets
from benchmarks.harness.checkpoint_flops import block_forward_flops, checkpoint_blocks
from benchmarks.harness.meters import saved_activation_bytes, step_memory
from benchmarks.harness.models import model_cases
from benchmarks.harness.partition_stats import BudgetedMinCut, RecordingPartitioner
from benchmarks.harness.records import Config, Record
from benchmarks.harness.systems import DEFAULT_SYSTEMS, make_backend
from benchmarks.harness.training import benchmark_settings
from recompute_pass import RecomputeOptions, RecomputePartitioner, capture_reports
from tests.support.full_size import full_only
from tests.support.harness import autograd_cache_off


def _quick(system: str, budget: float | None = None, model: str = "gpt") -> Config:
    return Config(model, system, budget, path="graphs", size="quick", repeats=2)


def _compile_recorded(model: torch.nn.Module, inputs, recorder: RecordingPartitioner) -> torch.Tensor:
    torch._dynamo.reset()
    with benchmark_settings():
        return torch.compile(copy.deepcopy(model), backend=make_backend(recorder, "graphs"))(*inputs)


@pytest.fixture(scope="module")
def gpt_block():
    case = model_cases()["gpt_block"]
    torch.manual_seed(0)
    model = case.build().train()
    torch.manual_seed(1)
    return model, case.inputs(2)


@pytest.mark.parametrize("budget", [0.0, 0.5, 1.0])
def test_recorded_stats_equal_our_report(gpt_block, budget: float) -> None:
    model, inputs = gpt_block
    recorder = RecordingPartitioner(
        RecomputePartitioner(RecomputeOptions(memory_budget=budget, fallback=False))
    )
    with capture_reports() as reports:
        _compile_recorded(model, inputs, recorder)
    (report,) = reports
    (stats,) = recorder.stats
    # Our report counts saved user inputs; the benchmark keeps them apart.
    assert stats.saved_bytes + stats.saved_input_bytes == report.saved_bytes
    assert stats.recompute_flops == report.recompute_flops
    assert stats.recompute_ops == len(report.recomputed)
    heavy = sum(r.flops for r in report.recomputed if r.kind in ("gemm", "conv", "attention"))
    assert stats.recompute_heavy_flops == heavy < stats.recompute_flops
    if budget in (0.0, 1.0):  # everything recomputable is recomputed / no GEMM is
        assert (heavy > 0) == (budget == 0.0)
    assert stats.forward_flops > 0 and stats.backward_flops > 0 and stats.partition_seconds > 0


def test_recorded_stats_of_pytorch_budget_partitioner(gpt_block) -> None:
    model, inputs = gpt_block
    full, low = RecordingPartitioner(BudgetedMinCut(None)), RecordingPartitioner(BudgetedMinCut(0.0))
    loss = _compile_recorded(model, inputs, full)
    _compile_recorded(model, inputs, low)
    assert loss.requires_grad
    assert low.total().saved_bytes < full.total().saved_bytes
    assert low.total().recompute_flops > full.total().recompute_flops


def test_step_memory_sees_what_autograd_saves(gpt_block) -> None:
    model, inputs = gpt_block
    model = copy.deepcopy(model)
    walked = {}

    def forward() -> torch.Tensor:
        torch.manual_seed(0)
        loss = model(*inputs)
        walked["bytes"] = saved_activation_bytes(loss, [*model.parameters(), *model.buffers(), *inputs])
        return loss

    memory, loss = step_memory(forward, lambda out: out.backward(), torch.device("cpu"))
    assert memory.after_forward_bytes - loss.untyped_storage().nbytes() == walked["bytes"] > 0
    assert memory.peak_bytes >= memory.after_forward_bytes


def test_checkpoint_flops_are_the_blocks_forward() -> None:
    case = model_cases()["gpt"]
    torch.manual_seed(0)
    model = case.build().train()
    inputs = case.inputs(2)
    flops = block_forward_flops(model, list(model.blocks), inputs)
    one = block_forward_flops(model, list(model.blocks)[:1], inputs)
    assert flops == 2 * one > 0
    checkpoint_blocks(list(model.blocks))
    assert {n for n, _ in model.named_parameters()} == {n for n, _ in case.build().named_parameters()}


def test_measure_our_partitioner_in_process() -> None:
    record = measure(_quick("recompute", 0.5))
    assert record.ok, record.error
    assert record.grads_ok and record.max_grad_diff < 1e-5
    assert record.saved_bytes == record.graph_saved_bytes == record.after_forward_bytes > 0
    assert record.graph_saved_bytes + record.graph_saved_input_bytes == record.report_saved_bytes
    assert record.recompute_flops == record.report_recompute_flops > 0
    assert record.report_min_bytes <= record.report_saved_bytes <= record.report_budget_bytes
    assert record.peak_bytes >= record.saved_bytes
    assert record.step_seconds > 0 and record.solve_seconds > 0 and record.solver_optimal


def test_worker_process_checkpoint_against_eager() -> None:
    """Through the subprocess runner, as the benchmark runs it."""
    eager = run_worker(_quick("eager"), timeout=300)
    checkpointed = run_worker(_quick("checkpoint"), timeout=300)
    assert eager.ok and checkpointed.ok, (eager.error, checkpointed.error)
    assert eager.saved_bytes == eager.after_forward_bytes > checkpointed.saved_bytes > 0
    assert checkpointed.saved_bytes_method == "allocator"
    assert checkpointed.max_grad_diff == 0.0 and checkpointed.recompute_flops > 0
    assert eager.recompute_flops == 0


def test_worker_reports_failures_as_records() -> None:
    record = run_worker(_quick("recompute", 0.5, model="no_such_model"), timeout=300)
    assert not record.ok and "no_such_model" in (record.error or "")


def test_plan_measures_pytorch_default_budget_once_and_resolves_byte_budgets() -> None:
    configs = plan_configs(
        ["gpt"], DEFAULT_SYSTEMS, (0.0, 1.0), path="graphs", device="cpu", size="quick", repeats=1
    )
    names = [(c.system, c.budget) for c in configs]
    assert ("compile", None) in names and ("compile_budget", 0.0) in names
    assert ("compile_budget", 1.0) not in names  # the default budget: that is ``compile``
    assert names[-3:] == [
        ("recompute_at_selective", None),
        ("recompute_at_pytorch", 0.0),
        ("recompute_at_pytorch", 1.0),
    ]
    compile_record = _record("compile", None, saved=100, flops=5)
    done = {(r.model, r.system, r.budget, r.path, r.device, r.size): r for r in [compile_record]}
    at_default = _resolve(Config("gpt", "recompute_at_pytorch", 1.0, "graphs", "cpu", "quick"), done)
    assert isinstance(at_default, Config) and at_default.budget_bytes == 100 + 8
    missing = _resolve(Config("gpt", "recompute_at_pytorch", 0.0, "graphs", "cpu", "quick"), done)
    assert isinstance(missing, str)


def _record(system: str, budget: float | None, *, saved: int, flops: int, ok: bool = True) -> Record:
    return Record(
        "gpt",
        system,
        budget,
        None,
        "graphs",
        "cpu",
        "quick",
        saved_bytes=saved,
        graph_saved_bytes=saved,
        graph_saved_input_bytes=8,
        recompute_flops=flops,
        forward_flops=1000,
        backward_flops=2000 + flops,
        peak_bytes=2 * saved,
        max_grad_diff=0.0 if ok else 0.1,
        grads_ok=ok,
    )


def test_frontier_verdicts_and_report(tmp_path) -> None:
    records = [
        _record("compile", None, saved=100, flops=5),
        _record("compile_budget", 0.0, saved=10, flops=50, ok=False),
        _record("compile_budget", 0.5, saved=60, flops=20),
        _record("recompute", 0.0, saved=30, flops=60),
        _record("recompute", 0.5, saved=55, flops=15),
        _record("recompute", 1.0, saved=90, flops=6),
        _record("recompute_selective", None, saved=70, flops=10),
        dataclasses.replace(_record("recompute_at_selective", None, saved=69, flops=4), budget_bytes=78),
    ]
    rows = {row.budget: row for row in compare_frontier(records, "gpt")}
    assert rows[0.0].verdict == "pytorch wrong" and not rows[0.0].counts
    assert rows[0.5].verdict == "met" and rows[0.5].ours.saved_bytes == 55
    assert rows[1.0].verdict == "met" and rows[1.0].ours.system == "recompute_at_selective"
    point = megatron_point(records)
    assert point is not None and point.pct(point.at_bytes) == pytest.approx(100 * 4 / 3000)
    met = {t.name.split(" ")[0]: t.met for t in targets(records, None)}
    assert met["At"] is True and met["Correct"] is True and met["Solve"] is None
    report = write_report(tmp_path, records, {"command": "test", "machine": {}})
    text = report.read_text()
    assert "**WRONG**" in text and "PyTorch's plan has **wrong gradients**" in text
    assert (tmp_path / "gpt.png").stat().st_size > 0


def test_frontier_compares_held_bytes_and_names_pointwise_excess() -> None:
    labels_saved = dataclasses.replace(
        _record("compile_budget", 0.0, saved=0, flops=50), graph_saved_input_bytes=16
    )
    labels_copied = _record("recompute", 0.0, saved=8, flops=50)  # 8 + 8 input bytes: as many
    assert fits(labels_copied, labels_saved) and held(labels_copied) == 16
    theirs = dataclasses.replace(_record("compile", None, saved=100, flops=5), recompute_heavy_flops=0)
    ours = dataclasses.replace(_record("recompute", 1.0, saved=80, flops=6), recompute_heavy_flops=0)
    (row,) = compare_frontier([theirs, ours], "gpt")
    assert row.verdict == "pointwise"
    heavier = dataclasses.replace(ours, recompute_heavy_flops=1, est_recompute_seconds=2.0)
    (row,) = compare_frontier([dataclasses.replace(theirs, est_recompute_seconds=1.0), heavier], "gpt")
    assert row.verdict == "missed"
    (row,) = compare_frontier([dataclasses.replace(theirs, est_recompute_seconds=3.0), heavier], "gpt")
    assert row.verdict == "est. time"
    (row,) = compare_frontier([labels_saved, labels_copied], "gpt")
    assert row.verdict == "met"


@full_only("the worker's Inductor path; CI compiles through Inductor in tests/inductor/test_inductor.py")
def test_inductor_configuration() -> None:
    """One real Inductor compile in a worker process (about a minute on 2 cores)."""
    record = run_worker(dataclasses.replace(_quick("recompute", 0.0), path="inductor"), timeout=900)
    assert record.ok, record.error
    assert record.grads_ok and record.saved_bytes == record.graph_saved_bytes
    assert record.compile_seconds > 0


def test_snapshot_freezes_the_code_under_test() -> None:
    import shutil

    from benchmarks.harness.snapshot import git_state, snapshot_code

    code = snapshot_code()
    try:
        assert (code / "recompute_pass" / "partitioner.py").exists()
        assert (code / "benchmarks" / "frontier" / "worker.py").exists()
        assert not (code / "benchmarks" / "deep" / "results").exists()
    finally:
        shutil.rmtree(code)
    assert set(git_state()) == {"head", "dirty"}


def test_distributed_fsdp2_measures_every_rank() -> None:
    """``--distributed fsdp2``: one configuration on 2 gloo ranks, and its table."""
    from benchmarks import distributed
    from benchmarks.harness import ranks

    config = distributed.DistConfig("llama", "recompute", 0.5, 2, "cpu", "graphs", "quick", repeats=1)
    results = ranks.run_ranks(
        distributed.measure_rank, world=2, timeout=150, config=dataclasses.asdict(config)
    )
    records = [distributed.RankRecord(**{**r, "plan_digests": tuple(r["plan_digests"])}) for r in results]
    assert [r.rank for r in records] == [0, 1]
    for record in records:
        assert record.grads_ok, record.max_grad_diff
        assert record.graphs and record.saved_bytes == record.report_saved_bytes
        assert record.peak_bytes and record.step_seconds
    assert records[0].plan_digests == records[1].plan_digests and records[0].plan_digests
    meta = {
        "world": 2,
        "backend": "gloo",
        "device": "cpu",
        "command": "python -m benchmarks.distributed --world 2",
        "wall_seconds": 1.0,
        "started": "now",
        "machine": {"cpu": "test", "cpu_count": 2, "torch": torch.__version__},
        "code": {"head": "abc", "dirty": False},
        "path": "graphs",
        "size": "quick",
        "repeats": 1,
        "load_average_before": None,
        "load_average_after": None,
    }
    text = distributed.results_md(records, meta)
    assert "| llama | recompute (milp) | 0.5 | 1 |" in text and "| same |" in text


def test_deep_benchmark_times_both_partitioners() -> None:
    """``benchmarks.deep`` times the partitioner call of ours and of PyTorch's alike."""
    from benchmarks.deep import partitioner_seconds
    from recompute_pass import recompute_backend

    case = model_cases(layers=1, dim=32, seq=16)["mlp"]
    for backend in ("inductor", recompute_backend):
        torch.compiler.reset()
        torch.manual_seed(0)
        model = case.build()
        with autograd_cache_off(), partitioner_seconds() as spent:
            torch.compile(model, backend=backend)(*case.inputs(2)).backward()
        assert len(spent) == 1 and spent[0] > 0, spent
