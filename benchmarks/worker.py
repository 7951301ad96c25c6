"""Measure one configuration; run as ``python -m benchmarks.worker CONFIG_JSON OUT_JSON``.

One configuration per process (``benchmarks.run`` spawns them), so no Dynamo state,
compiled code or cache carries from one system to the next. Inductor/AOTAutograd caches
are off and ``fallback_random`` is on: compiled dropout calls the same RNG kernel as eager,
so from the same seed it draws the same masks and gradients are comparable bit-for-bit up
to rounding.
"""

from __future__ import annotations

import contextlib
import copy
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from benchmarks.cases import bench_cases
from benchmarks.checkpoint_flops import block_forward_flops, checkpoint_blocks
from benchmarks.measure import saved_activation_bytes, step_memory
from benchmarks.partition_stats import RecordingPartitioner
from benchmarks.records import GRAD_TOLERANCE, Config, Record
from benchmarks.systems import SYSTEMS, make_backend
from recompute_pass import PartitionReport, capture_reports
from recompute_pass import torch_internals as ti
from recompute_pass.partitioner import code_hash


def benchmark_settings() -> contextlib.AbstractContextManager[object]:
    """Caches off (every compile partitions); compiled dropout draws eager's masks."""
    return ti.inductor_config.patch(force_disable_caches=True, fallback_random=True)


def profile_name(device: torch.device) -> str:
    """The cost-model profile for estimates: the CPU one, or the GPU's (H100 if unknown)."""
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower()
    return next((p for p in ("h200", "h100", "a100") if p in name), "h100")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _clear_grads(model: nn.Module) -> None:
    for p in model.parameters():
        p.grad = None


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _grad_diff(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> float:
    if actual.keys() != expected.keys():
        return float("inf")
    scale = max(g.abs().max().item() for g in expected.values()) or 1.0
    return max((actual[k] - g).abs().max().item() for k, g in expected.items()) / scale


def _sum_reports(reports: list[PartitionReport]) -> dict[str, object]:
    if not reports:
        return {}
    fallbacks = [r.fallback for r in reports if r.fallback]
    notes = sorted({n for r in reports for n in r.notes})
    return dict(
        report_saved_bytes=sum(r.saved_bytes for r in reports),
        report_recompute_flops=sum(r.recompute_flops for r in reports),
        report_est_recompute_seconds=sum(r.estimated_recompute_time for r in reports),
        report_budget_bytes=sum(r.budget_bytes for r in reports),
        report_min_bytes=sum(r.min_bytes for r in reports),
        report_max_bytes=sum(r.max_bytes for r in reports),
        solve_seconds=sum(r.solve_seconds for r in reports),
        solver_optimal=all(r.optimal for r in reports),
        fallback="; ".join(fallbacks) or None,
        notes="; ".join(notes) or None,
    )


def measure(config: Config) -> Record:
    """Build the model, run eager for reference gradients, then the system under test."""
    with benchmark_settings():
        torch._dynamo.reset()
        return _measure(config)


def _measure(config: Config) -> Record:
    start = time.perf_counter()
    device = torch.device(config.device)
    case = bench_cases(config.size)[config.model]
    system = SYSTEMS[config.system]
    step_seed = config.seed + 2

    torch.manual_seed(config.seed)
    base = case.build().to(device).train()
    torch.manual_seed(config.seed + 1)
    inputs = tuple(t.to(device) for t in case.inputs())

    reference = copy.deepcopy(base)
    torch.manual_seed(step_seed)
    reference_loss = reference(*inputs)
    reference_loss.backward()
    reference_grads = _grads(reference)
    del reference

    model = copy.deepcopy(base)
    fn: Callable[..., torch.Tensor] = model
    recorder: RecordingPartitioner | None = None
    fields: dict[str, object] = {}
    if system.kind == "checkpoint":
        counted = copy.deepcopy(base)
        fields["recompute_flops"] = block_forward_flops(counted, case.blocks(counted), inputs)
        checkpoint_blocks(case.blocks(model))
    elif system.kind == "compiled":
        partitioner = system.partitioner(config.budget, config.budget_bytes)
        assert partitioner is not None
        recorder = RecordingPartitioner(partitioner, device=profile_name(device))
        fn = torch.compile(model, backend=make_backend(recorder, config.path))
    elif system.kind == "eager":
        fields["recompute_flops"] = 0
    exclude = [*model.parameters(), *model.buffers(), *inputs]

    # First step: compiles; gradients against eager; saved tensors walked before backward.
    with capture_reports() as reports:
        _clear_grads(model)
        torch.manual_seed(step_seed)
        t0 = time.perf_counter()
        loss = fn(*inputs)
        _sync(device)
        first_forward = time.perf_counter() - t0
        # The walk would unpack a checkpoint's saved tensors, i.e. run its recomputation.
        walked = None if system.kind == "checkpoint" else saved_activation_bytes(loss, exclude)
        t0 = time.perf_counter()
        loss.backward()
        _sync(device)
        first_step = first_forward + time.perf_counter() - t0
    grads = _grads(model)
    diff = _grad_diff(grads, reference_grads)

    # Second step: allocator trace (peak, what the forward left allocated).
    _clear_grads(model)
    torch.manual_seed(step_seed)
    memory, mem_loss = step_memory(lambda: fn(*inputs), lambda out: out.backward(), device)
    after_forward = memory.after_forward_bytes - mem_loss.untyped_storage().nbytes()

    times = []
    for _ in range(config.repeats):
        _clear_grads(model)
        torch.manual_seed(step_seed)
        _sync(device)
        t0 = time.perf_counter()
        fn(*inputs).backward()
        _sync(device)
        times.append(time.perf_counter() - t0)
    quartiles = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    median = statistics.median(times)

    if recorder is not None:
        stats = recorder.total()
        fields.update(
            graphs=stats.graphs,
            graph_saved_bytes=stats.saved_bytes,
            graph_saved_input_bytes=stats.saved_input_bytes,
            graph_saved_tensors=stats.saved_tensors,
            recompute_flops=stats.recompute_flops,
            recompute_heavy_flops=stats.recompute_heavy_flops,
            recompute_ops=stats.recompute_ops,
            est_recompute_seconds=stats.recompute_seconds,
            forward_flops=stats.forward_flops,
            backward_flops=stats.backward_flops,
            partition_seconds=stats.partition_seconds,
            compile_seconds=max(0.0, first_step - median),
        )
    fields.update(_sum_reports(reports))
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
        step_seconds_iqr=quartiles[2] - quartiles[0],
        step_seconds_min=min(times),
        repeats=config.repeats,
        max_grad_diff=diff,
        loss_diff=abs(loss.item() - reference_loss.item()),
        grads_ok=diff <= GRAD_TOLERANCE,
        wall_seconds=time.perf_counter() - start,
        code_hash=code_hash()[:12],
        **fields,  # type: ignore[arg-type]
    )


def main(argv: list[str]) -> int:
    config = Config.from_dict(json.loads(argv[0]))
    out = Path(argv[1])
    start = time.perf_counter()
    try:
        record = measure(config)
    except Exception as error:
        detail = traceback.format_exc(limit=-3).strip().splitlines()
        message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        record = Record.failed(
            config, message + " | " + " / ".join(detail[-4:])[:600], time.perf_counter() - start
        )
    out.write_text(json.dumps(record.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
