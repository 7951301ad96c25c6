"""DDP, FSDP2 and tensor parallelism with the recompute backend, on 2 gloo ranks (CPU).

Each test spawns one process group and runs every budget inside it (a spawn costs seconds
on 2 cores). Per rank and budget: gradients against one eager single-process step on the
global batch, the plan digests of all ranks, and what the reports and graphs say about
collectives and parameters. The rank functions return plain data; the asserts are here.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from typing import Any

import pytest
import torch
import torch.distributed as dist

from benchmarks.harness.meters import warnings_logged
from recompute_pass import capture_reports, inductor_backend, recompute_backend, recompute_eager_backend
from recompute_pass import torch_internals as ti
from tests.support.distributed import (
    Recorder,
    build,
    full_grads,
    global_batch,
    reference_grads,
    relative_error,
    report_facts,
    run_ranks,
)

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")

BUDGETS = (1.0, 0.5, 0.0)
TOLERANCE = 1e-5  # relative, fp32
DDP_DIM = 256  # 1 MiB linears: DDP's 1 MiB buckets split the graph (DDPOptimizer)


def _backend(budget: float, inductor: bool = False, **options: Any) -> tuple[Any, Recorder]:
    """The recompute backend's partitioner, recorded (its graphs are inspected)."""
    backend = (recompute_backend if inductor else recompute_eager_backend).with_options(
        memory_budget=budget, **options
    )
    recorder = Recorder(backend.partitioner())
    return (inductor_backend if inductor else ti.eager_aot_backend)(recorder), recorder


def _step(module: torch.nn.Module, fn: Any, batch: torch.Tensor, recorder: Recorder) -> dict[str, Any]:
    with capture_reports() as reports:
        fn(batch).backward()
    return {"reports": [report_facts(r) for r in reports], "graphs": recorder.graphs}


# ---- rank functions (run in the spawned processes) ----


def _ddp_rank(rank: int, world: int) -> dict[float, dict[str, Any]]:
    from torch.nn.parallel import DistributedDataParallel

    model = build(DDP_DIM)
    batch = global_batch(world, DDP_DIM)
    expected = reference_grads(copy.deepcopy(model), batch)
    out = {}
    for budget in BUDGETS:
        torch._dynamo.reset()
        ddp = DistributedDataParallel(copy.deepcopy(model), bucket_cap_mb=1)
        backend, recorder = _backend(budget)
        result = _step(ddp, torch.compile(ddp, backend=backend), batch.chunk(world)[rank], recorder)
        result["error"] = relative_error(full_grads(ddp.module), expected)
        out[budget] = result
    return out


def _fsdp(model: torch.nn.Module, backend: Any) -> torch.nn.Module:
    """torchtitan's order: compile each block, shard each block, then the root."""
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        block.compile(backend=backend)
        fully_shard(block)
    fully_shard(model)
    return model


def _fsdp_rank(rank: int, world: int, budgets: tuple[float, ...], inductor: bool = False) -> dict:
    model = build()
    batch = global_batch(world)
    expected = reference_grads(copy.deepcopy(model), batch)
    out = {}
    for budget in budgets:
        torch._dynamo.reset()
        # Saved bytes: the test pins that a lower budget holds fewer bytes per rank (FSDP's
        # gathered parameters are outside what a peak budget sees).
        backend, recorder = _backend(budget, inductor, budget_mode="saved")
        sharded = _fsdp(copy.deepcopy(model), backend)
        result = _step(sharded, sharded, batch.chunk(world)[rank], recorder)
        result["error"] = relative_error(full_grads(sharded), expected)
        out[budget] = result
    return out


def _tp_rank(rank: int, world: int) -> dict[float, dict[str, Any]]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    model = build()
    batch = global_batch(world)  # tensor parallel: every rank runs the whole batch
    expected = reference_grads(copy.deepcopy(model), batch)
    out = {}
    for budget in BUDGETS:
        torch._dynamo.reset()
        parallel = copy.deepcopy(model)
        for block in parallel.blocks:
            parallelize_module(block, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        backend, recorder = _backend(budget)
        result = _step(parallel, torch.compile(parallel, backend=backend), batch, recorder)
        result["error"] = relative_error(full_grads(parallel), expected)
        out[budget] = result
    return out


def _mismatch_rank(rank: int, world: int) -> dict[bool, dict[str, Any]]:
    """Rank 1 prices pointwise work far higher than rank 0 (its own device profile): at budget
    0.5 it saves other values. With ``sync_plans`` off the plans differ; on, rank 0's wins."""
    from cost_model import get_profile

    cpu = get_profile("cpu")
    device = cpu if rank == 0 else dataclasses.replace(cpu, name="slow-vector", vector_flops=1e7)
    model = build()
    batch = global_batch(world)
    expected = reference_grads(copy.deepcopy(model), batch)
    out = {}
    for sync in (False, True):
        torch._dynamo.reset()
        backend, recorder = _backend(0.5, device=device, sync_plans=sync)
        sharded = _fsdp(copy.deepcopy(model), backend)
        with warnings_logged() as warnings:
            result = _step(sharded, sharded, batch.chunk(world)[rank], recorder)
        result["error"] = relative_error(full_grads(sharded), expected)
        result["warnings"] = warnings
        out[sync] = result
    return out


def _different_graphs_rank(rank: int, world: int) -> str:
    """Rank 0 compiles tanh where rank 1 compiles sigmoid: rank 0's plan names a value
    rank 1's graph lacks. Returns the error each rank raised."""
    torch.manual_seed(0)
    weight = torch.randn(16, 16, requires_grad=True)
    act = torch.tanh if rank == 0 else torch.sigmoid
    fn = torch.compile(lambda x: act(x @ weight).sum(), backend=recompute_eager_backend)
    try:
        fn(torch.randn(4, 16)).backward()
    except Exception as error:
        return str(error)
    return ""


def _exchange_rank(rank: int, world: int) -> dict[str, Any]:
    """Three graphs, plans synced: both ranks partition the first; rank 1's partition fails
    on the second; rank 1 compiles the third with ``sync_plans=False`` (it posts nothing).
    Returns the errors, whether the first round's keys are gone from the store, and the
    group's collective count after the first (the exchange must leave it alone)."""
    from datetime import timedelta
    from unittest import mock

    store = ti.default_store()
    torch.manual_seed(0)
    weight = torch.randn(16, 16, requires_grad=True)

    def run(act: Any, backend: Any = recompute_eager_backend) -> str:
        try:
            torch.compile(lambda x: act(x @ weight).sum(), backend=backend)(torch.randn(4, 16)).backward()
        except Exception as error:
            return str(error)
        return ""

    out: dict[str, Any] = {"first": run(torch.tanh)}
    dist.barrier()
    out["collectives"] = ti.collectives_issued()
    out["keys_left"] = store.check(["recompute_pass/plan/1/digest/0", "recompute_pass/plan/1/digest/1"])
    fails = mock.patch("recompute_pass.partitioner.build_problem", side_effect=ValueError("injected"))
    with fails if rank == 1 else contextlib.nullcontext():
        out["one_failed"] = run(torch.sigmoid)
    store.set_timeout(timedelta(seconds=5))
    out["silent_peer"] = run(torch.sin, recompute_eager_backend.with_options(sync_plans=rank == 0))
    return out


# ---- assertions ----


def _digests(ranks: list[dict], key: Any) -> list[list[str]]:
    return [[r["digest"] for r in rank[key]["reports"]] for rank in ranks]


def _check_common(ranks: list[dict], key: Any) -> None:
    """Gradients, identical plans, per-rank reports, and nothing recomputed that must not be."""
    digests = _digests(ranks, key)
    assert digests[0] and all(d == digests[0] for d in digests), digests
    for rank, result in enumerate(r[key] for r in ranks):
        assert result["error"] <= TOLERANCE, (key, rank, result["error"])
        assert result["reports"], "no graph was partitioned"
        for report in result["reports"]:
            assert report["fallback"] is None, report["fallback"]
            assert (report["rank"], report["world_size"]) == (rank, len(ranks))
            over = any("over this rank's budget" in n for n in report["notes"])  # adopted
            assert over or report["saved_bytes"] <= report["budget_bytes"]
            assert "collective" not in report["recomputed_kinds"]
        for graph in result["graphs"]:
            assert graph["recomputed_collectives"] == []
            assert graph["params_only"] == [], "a copy of a parameter is saved for backward"


def test_ddp_gradients_and_plans_match_at_every_budget() -> None:
    ranks = run_ranks(_ddp_rank)
    for budget in BUDGETS:
        _check_common(ranks, budget)
        # DDPOptimizer split the forward at bucket boundaries; each piece has its own plan,
        # within its own share of the budget (checked per report above).
        assert len(ranks[0][budget]["reports"]) >= 2


def test_fsdp2_gradients_and_plans_match_and_gathered_params_are_not_saved() -> None:
    ranks = run_ranks(_fsdp_rank, budgets=BUDGETS)
    for budget in BUDGETS:
        _check_common(ranks, budget)
        for result in (r[budget] for r in ranks):
            for report, graph in zip(result["reports"], result["graphs"], strict=True):
                # The all-gathered parameters are graph inputs FSDP frees after forward and
                # gathers again in backward: saved only as static inputs (free), never as
                # activations, and nothing saved is computed from them alone (above).
                assert graph["saved_static"] == report["saved_static"]
                assert all(shape == (8, 32) for _, shape, _ in graph["saved_inputs"]), graph
    # The lower the budget, the fewer bytes each rank holds for the same local batch.
    saved = [sum(r["saved_bytes"] for r in ranks[0][b]["reports"]) for b in BUDGETS]
    assert saved == sorted(saved, reverse=True) and saved[-1] < saved[0]


def test_tensor_parallel_collectives_are_never_recomputed() -> None:
    ranks = run_ranks(_tp_rank)
    for budget in BUDGETS:
        _check_common(ranks, budget)
        for result in (r[budget] for r in ranks):
            (graph,) = result["graphs"]
            assert graph["forward_collectives"] > 0  # the all-reduces are in the graph
            # Local parameter shards are static inputs (AOTAutograd's indices, mapped onto the
            # flattened DTensors): no float input but the batch is charged as an activation.
            charged = [(n, s) for n, s, dtype in graph["saved_inputs"] if dtype == "torch.float32"]
            assert all(shape == (16, 32) for _, shape in charged), charged


def test_differing_cost_models_agree_on_rank_0_plan() -> None:
    ranks = run_ranks(_mismatch_rank)
    unsynced = _digests(ranks, False)
    assert unsynced[0] != unsynced[1], "the per-rank profiles should give different plans"
    _check_common(ranks, True)
    for rank, result in enumerate(r[True] for r in ranks):
        assert len(result["warnings"]) == 1, result["warnings"]
        assert "rank 0's plan" in result["warnings"][0]
        note = "plan of rank 0" if rank else "took rank 0's plan"
        assert all(any(note in n for n in r["notes"]) for r in result["reports"])
    for result in (r[False] for r in ranks):  # each rank's own plan is right too, just different
        assert result["error"] <= TOLERANCE and result["warnings"] == []


def test_ranks_that_cannot_agree_fail_together() -> None:
    """Graphs that differ between ranks are not made to agree: every rank raises the same
    error (no rank trains on with another plan, none waits for a peer forever)."""
    errors = run_ranks(_different_graphs_rank)
    for error in errors:
        assert "rank(s) [1] could not use rank 0's plan" in error, error
        assert "sync_plans=False" in error


def test_plans_are_exchanged_through_the_store_and_no_rank_goes_on_alone() -> None:
    """The exchange issues no collective on the user's group (1: the test's own barrier)
    and deletes its keys once every rank has read them. A rank whose partition fails does
    not fall back alone: every rank raises. A peer that never posts makes the waiting rank
    raise after the store's timeout rather than hang or fall back."""
    ranks = run_ranks(_exchange_rank)
    assert [r["first"] for r in ranks] == ["", ""]
    assert [r["collectives"] for r in ranks] == [1, 1]
    assert [r["keys_left"] for r in ranks] == [False, False]
    for result in ranks:
        assert "rank(s) [1] could not partition this graph" in result["one_failed"], result["one_failed"]
    assert "could not exchange plans" in ranks[0]["silent_peer"], ranks[0]["silent_peer"]
    assert ranks[1]["silent_peer"] == ""


@pytest.fixture
def single_rank_group() -> Any:
    """A gloo group of one rank in this process: functional collectives trace, nothing syncs."""
    from benchmarks.harness.ranks import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_collectives_are_never_recomputable_even_when_tagged_for_recompute(single_rank_group: Any) -> None:
    """PyTorch recomputes a collective a checkpoint policy tags MUST_RECOMPUTE (doubling its
    communication); here it stays saved, with the reason in the candidate."""
    import torch.distributed._functional_collectives as funcol
    from torch.utils.checkpoint import CheckpointPolicy

    from recompute_pass.graph.joint_graph import analyze, prepare

    weight = torch.randn(16, 16, requires_grad=True)
    found: dict[str, tuple[bool, str]] = {}

    def inspect(gm: Any, joint_inputs: Any, **kwargs: Any) -> Any:
        for node in gm.graph.nodes:
            if getattr(node.target, "namespace", "") == "_c10d_functional":
                node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        prepare(gm)
        joint = analyze(
            gm,
            num_fwd_outputs=kwargs["num_fwd_outputs"],
            static_lifetime_input_indices=kwargs["static_lifetime_input_indices"],
        )
        for c in joint.candidates:
            if getattr(c.node.target, "namespace", "") == "_c10d_functional":
                found[c.node.name] = (c.can_recompute, c.reason)
        return ti.default_partition(gm, joint_inputs, **kwargs)

    torch.compiler.reset()
    fn = torch.compile(
        lambda x: torch.cos(funcol.all_reduce(torch.sin(x @ weight), "sum", single_rank_group)).sum(),
        backend=ti.eager_aot_backend(inspect),
    )
    fn(torch.randn(4, 16)).backward()
    assert set(found) == {"all_reduce", "wait_tensor"}
    assert all(not can and "collective" in reason for can, reason in found.values()), found


def test_fsdp2_through_inductor() -> None:
    ranks = run_ranks(_fsdp_rank, budgets=(0.5,), inductor=True, timeout=480)
    _check_common(ranks, 0.5)
