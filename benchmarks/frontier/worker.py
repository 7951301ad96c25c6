"""Measure one configuration; run as ``python -m benchmarks.frontier.worker CONFIG_JSON OUT_JSON``
(or in a process of one's own through ``record_of``, as ``benchmarks.gpu`` does).

One configuration per process (``benchmarks.frontier`` spawns them), so no Dynamo state,
compiled code or cache carries from one system to the next. Inductor/AOTAutograd caches
are off and ``fallback_random`` is on: compiled dropout calls the same RNG kernel as eager,
so from the same seed it draws the same masks and gradients are comparable bit-for-bit up
to rounding.
"""

from __future__ import annotations

import contextlib
import copy
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from benchmarks.harness.cases import BenchCase, bench_cases
from benchmarks.harness.checkpoint_flops import block_forward_flops, checkpoint_blocks
from benchmarks.harness.partition_stats import RecordingPartitioner
from benchmarks.harness.records import GRAD_TOLERANCE, Config, Record
from benchmarks.harness.systems import SYSTEMS, make_backend
from benchmarks.harness.training import (
    Steps,
    benchmark_settings,
    build,
    eager_step,
    median_and_iqr,
    profile_name,
    relative_grad_diff,
)
from recompute_pass import PartitionReport
from recompute_pass import torch_internals as ti
from recompute_pass.partitioner import code_hash


def _sum_reports(reports: list[PartitionReport]) -> dict[str, object]:
    """Totals over a model's graphs (a graph break gives several); None where a fallback
    report has no figure. Peaks of consecutive graphs do not add up exactly: the sum is an
    upper bound, exact for one graph."""
    if not reports:
        return {}
    fallbacks = [r.fallback for r in reports if r.fallback]
    notes = sorted({n for r in reports for n in r.notes})

    def total(field: str) -> object:
        values = [getattr(r, field) for r in reports]
        return None if None in values else sum(values)

    return dict(
        report_saved_bytes=total("saved_bytes"),
        report_recompute_flops=total("recompute_flops"),
        report_est_recompute_seconds=total("estimated_recompute_time"),
        report_budget_bytes=total("budget_bytes"),
        report_min_bytes=total("min_bytes"),
        report_max_bytes=total("max_bytes"),
        report_predicted_peak_bytes=total("predicted_peak_bytes"),
        solve_seconds=total("solve_seconds"),
        solver_optimal=all(r.optimal for r in reports),
        fallback="; ".join(fallbacks) or None,
        notes="; ".join(notes) or None,
    )


def measure_config(config: Config) -> Record:
    """Build the model, run eager for reference gradients, then the system under test."""
    # Offload on a GPU: reuse pinned host buffers across steps, as training would (a fresh
    # ``cudaHostAlloc`` per offloaded tensor costs milliseconds a step).
    pool = SYSTEMS[config.system].offload and config.device == "cuda"
    with benchmark_settings(), ti.pinned_memory_pool() if pool else contextlib.nullcontext():
        torch._dynamo.reset()
        return _measure(config)


@dataclass
class _UnderTest:
    """The configured system, ready to step: eager, checkpointed or compiled."""

    kind: str
    model: nn.Module
    fn: Callable[..., torch.Tensor]
    recorder: RecordingPartitioner | None
    fields: dict[str, object]  # record fields known before any step
    # Copies used in preparation, held until the record is made: freed by the garbage
    # collector mid-step, they would show as negative allocations in the CPU memory trace.
    keep_alive: tuple[object, ...] = ()


def _measure(config: Config) -> Record:
    start = time.perf_counter()
    device = torch.device(config.device)
    case = bench_cases(config.size)[config.model]
    step_seed = config.seed + 2
    base, inputs = build(case, config.seed, device)
    reference_loss, reference_grads = eager_step(base, inputs, step_seed)
    under = _system_under_test(config, case, base, inputs, device)
    steps = Steps(under.model, under.fn, inputs, step_seed, device)
    # The walk would unpack a checkpoint's saved tensors, i.e. run its recomputation.
    first = steps.first(walk=under.kind != "checkpoint")
    diff = relative_grad_diff(first.grads, reference_grads)
    memory, after_forward = steps.memory()
    times = steps.timed(config.repeats)
    median, iqr = median_and_iqr(times)
    fields = dict(under.fields)
    if under.recorder is not None:
        fields.update(_recorder_fields(under.recorder, compile_seconds=max(0.0, first.seconds - median)))
    fields.update(_sum_reports(first.reports))
    walked = first.walked_bytes
    return Record(
        model=config.model,
        system=config.system,
        budget=config.budget,
        budget_bytes=config.budget_bytes,
        path=config.path,
        device=config.device,
        size=config.size,
        saved_bytes=after_forward if walked is None else walked,
        saved_bytes_method="allocator" if walked is None else "autograd-walk",
        after_forward_bytes=after_forward,
        peak_bytes=memory.peak_bytes,
        step_seconds=median,
        step_seconds_iqr=iqr,
        step_seconds_min=min(times),
        repeats=config.repeats,
        max_grad_diff=diff,
        loss_diff=abs(first.loss.item() - reference_loss.item()),
        grads_ok=diff <= GRAD_TOLERANCE,
        wall_seconds=time.perf_counter() - start,
        code_hash=code_hash()[:12],
        **fields,  # type: ignore[arg-type]
    )


def _system_under_test(
    config: Config, case: BenchCase, base: nn.Module, inputs: tuple[torch.Tensor, ...], device: torch.device
) -> _UnderTest:
    """A copy of ``base`` made into the configured system (compiling is left to its first step)."""
    system = SYSTEMS[config.system]
    model = copy.deepcopy(base)
    if system.kind == "checkpoint":
        counted = copy.deepcopy(base)
        flops = block_forward_flops(counted, case.blocks(counted), inputs)
        checkpoint_blocks(case.blocks(model))
        return _UnderTest(system.kind, model, model, None, {"recompute_flops": flops}, (counted,))
    if system.kind == "compiled":
        partitioner = system.partitioner(config.budget, config.budget_bytes)
        assert partitioner is not None
        recorder = RecordingPartitioner(partitioner, device=profile_name(device))
        fn = torch.compile(model, backend=make_backend(recorder, config.path))
        return _UnderTest(system.kind, model, fn, recorder, {})
    fields: dict[str, object] = {"recompute_flops": 0} if system.kind == "eager" else {}
    return _UnderTest(system.kind, model, model, None, fields)


# Record field: the ``PartitionStats`` attribute it takes, summed over the compiled graphs.
_RECORDED = {
    "graphs": "graphs",
    "graph_saved_bytes": "saved_bytes",
    "graph_saved_input_bytes": "saved_input_bytes",
    "graph_saved_tensors": "saved_tensors",
    "recompute_flops": "recompute_flops",
    "recompute_heavy_flops": "recompute_heavy_flops",
    "recompute_ops": "recompute_ops",
    "est_recompute_seconds": "recompute_seconds",
    "forward_flops": "forward_flops",
    "backward_flops": "backward_flops",
    "partition_seconds": "partition_seconds",
}


def _recorder_fields(recorder: RecordingPartitioner, *, compile_seconds: float) -> dict[str, object]:
    """What the recorded partitions hold, summed over the compiled graphs."""
    stats = recorder.total()
    return {field: getattr(stats, name) for field, name in _RECORDED.items()} | {
        "compile_seconds": compile_seconds
    }


def record_of(config: Config) -> Record:
    """The configuration's record: what it measured, or why it failed."""
    start = time.perf_counter()
    try:
        return measure_config(config)
    except Exception as error:
        detail = traceback.format_exc(limit=-3).strip().splitlines()
        message = f"{type(error).__name__}: {error}".splitlines()[0][:300] + " | " + " / ".join(detail[-4:])
        return Record.failed(config, message[:900], time.perf_counter() - start)


def main(argv: list[str]) -> int:
    config = Config.from_dict(json.loads(argv[0]))
    Path(argv[1]).write_text(json.dumps(record_of(config).to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
