"""A step's budget on 2 gloo ranks: DDP, whose DDPOptimizer splits the compiled model into
a graph per gradient bucket, and FSDP2 compiled per block (torchtitan's order).

Each rank records its own step (its eager gaps: DDP's bucket all-reduces, FSDP's gathered
parameters) and plans its graphs for it; the cap is checked on each rank's measured peak
of the step after the planned one, against the prediction of its own step report.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.distributed as dist

from benchmarks.harness.meters import step_memory
from recompute_pass import capture_reports, recompute_eager_backend
from recompute_pass.step import PLANNER
from tests.support.distributed import (
    build,
    full_grads,
    global_batch,
    reference_grads,
    relative_error,
    run_ranks,
)

pytestmark = [
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable"),
]

# FSDP2 on gloo frees a gathered buffer early or late as its collective's thread finishes:
# its eager step's peak varies by one buffer from step to step (519,124 B or 651,720 B at
# dim 64, uncompiled). No plan can predict which; the step is measured several times, and
# its lowest peak is the one the cap is checked on.
MEASURED_STEPS = 4
DDP_DIM = 256  # 1 MiB linears: DDP's 1 MiB buckets split the graph (DDPOptimizer)


def _planned(step: Any, model: torch.nn.Module) -> Any:
    """Steps until the step is planned, gradients set to None between them as optimizers
    do; its report."""
    for _ in range(3):
        with capture_reports() as reports:
            step().backward()
        model.zero_grad(set_to_none=True)
        if reports.steps:
            return reports.steps[0]
    raise AssertionError("the step was never planned")


def _run(
    model: torch.nn.Module, prepare: Any, batch: torch.Tensor, options: dict[str, Any]
) -> dict[str, Any]:
    torch._dynamo.reset()
    PLANNER.reset()
    compiled = prepare(copy.deepcopy(model), recompute_eager_backend.with_options(**options))
    report = _planned(lambda: compiled(batch), compiled)
    peaks = []
    for _ in range(MEASURED_STEPS):
        for p in compiled.parameters():
            p.grad = None
        memory, _ = step_memory(lambda: compiled(batch), lambda loss: loss.backward(), torch.device("cpu"))
        peaks.append(memory.peak_bytes)
    return {
        "peak": min(peaks),
        "peaks": peaks,
        "predicted": report.predicted_peak_bytes,
        "graphs": len(report.graphs),
        "planned": sum(g.planned for g in report.graphs),
        "grads": full_grads(compiled.module if hasattr(compiled, "module") else compiled),
    }


def _budgets_and_cap(rank: int, world: int, prepare: Any, dim: int) -> dict[str, Any]:
    model = build(dim)
    batch = global_batch(world, dim)
    expected = reference_grads(copy.deepcopy(model), batch)
    local = batch.chunk(world)[rank]
    out = {b: _run(model, prepare, local, dict(memory_budget=b)) for b in (1.0, 0.0)}
    midway = torch.tensor((out[1.0]["peak"] + out[0.0]["peak"]) // 2)
    dist.all_reduce(midway, op=dist.ReduceOp.MIN)  # one cap for every rank
    out["cap"] = _run(model, prepare, local, dict(peak_memory_bytes=int(midway)))
    out["cap"]["cap"] = int(midway)
    for result in out.values():
        result["error"] = relative_error(result.pop("grads"), expected)
    return out


def _ddp(model: torch.nn.Module, backend: Any) -> Any:
    from torch.nn.parallel import DistributedDataParallel

    return torch.compile(DistributedDataParallel(model, bucket_cap_mb=1), backend=backend)


def _fsdp(model: torch.nn.Module, backend: Any) -> Any:
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        block.compile(backend=backend)
        fully_shard(block)
    fully_shard(model)
    return model


def _ddp_rank(rank: int, world: int) -> dict[str, Any]:
    return _budgets_and_cap(rank, world, _ddp, DDP_DIM)


def _fsdp_rank(rank: int, world: int) -> dict[str, Any]:
    return _budgets_and_cap(rank, world, _fsdp, 64)


def _check(ranks: list[dict[str, Any]], *, min_graphs: int) -> None:
    for result in ranks:
        assert result["cap"]["graphs"] >= min_graphs
        assert result["cap"]["peak"] <= result["cap"]["cap"], result
        assert result[0.0]["peak"] <= result[1.0]["peak"]
        for config in result.values():
            # The step's steady part is never under-predicted (the recorded step may have
            # held FSDP2's late buffers: then it over-predicts, by whole buffers).
            assert config["peak"] <= config["predicted"] * 1.01, result
            assert config["error"] < 1e-5


def test_ddp_buckets_meet_the_steps_cap_on_each_rank() -> None:
    ranks = run_ranks(_ddp_rank, timeout=600)
    _check(ranks, min_graphs=3)
    for result in ranks:  # DDP's step does not jitter: every measured step is the predicted one
        for config in result.values():
            assert all(p == pytest.approx(config["predicted"], rel=0.01) for p in config["peaks"]), result


def test_fsdp2_per_block_meets_the_steps_cap_on_each_rank() -> None:
    _check(run_ranks(_fsdp_rank, timeout=600), min_graphs=2)
