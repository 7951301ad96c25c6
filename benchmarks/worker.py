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
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from benchmarks.cases import BenchCase, bench_cases
from benchmarks.checkpoint_flops import block_forward_flops, checkpoint_blocks
from benchmarks.measure import StepMemory, saved_activation_bytes, step_memory
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
    return next((p for p in ("gh200", "h200", "h100", "a100") if p in name), "h100")


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


def measure(config: Config) -> Record:
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


@dataclass
class _FirstStep:
    """The first step: it compiles, gives the gradients and the walked saved bytes."""

    loss: torch.Tensor
    seconds: float  # forward + backward, compilation included
    walked_bytes: int | None  # None for checkpointing (the walk would run its recomputation)
    grads: dict[str, torch.Tensor]
    reports: list[PartitionReport]


def _measure(config: Config) -> Record:
    start = time.perf_counter()
    device = torch.device(config.device)
    case = bench_cases(config.size)[config.model]
    step_seed = config.seed + 2
    base, inputs = _build(case, config.seed, device)
    reference_loss, reference_grads = _eager_step(base, inputs, step_seed)
    under = _system_under_test(config, case, base, inputs, device)
    first = _first_step(under, inputs, step_seed, device)
    diff = _grad_diff(first.grads, reference_grads)
    memory, after_forward = _memory_step(under, inputs, step_seed, device)
    times = _timed_steps(under, inputs, step_seed, device, config.repeats)
    median, iqr = _median_and_iqr(times)
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


def _build(case: BenchCase, seed: int, device: torch.device) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model, in training mode, and its inputs, each from its own seed."""
    torch.manual_seed(seed)
    base = case.build().to(device).train()
    torch.manual_seed(seed + 1)
    inputs = tuple(t.to(device) for t in case.inputs())
    return base, inputs


def _eager_step(
    base: nn.Module, inputs: tuple[torch.Tensor, ...], step_seed: int
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and gradients of one eager step of a copy of ``base``: the reference."""
    reference = copy.deepcopy(base)
    torch.manual_seed(step_seed)
    loss = reference(*inputs)
    loss.backward()
    return loss, _grads(reference)


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


def _first_step(
    under: _UnderTest, inputs: tuple[torch.Tensor, ...], step_seed: int, device: torch.device
) -> _FirstStep:
    """Compiles; gradients to compare with eager; saved tensors walked before backward."""
    exclude = [*under.model.parameters(), *under.model.buffers(), *inputs]
    with capture_reports() as reports:
        _clear_grads(under.model)
        torch.manual_seed(step_seed)
        t0 = time.perf_counter()
        loss = under.fn(*inputs)
        _sync(device)
        forward_seconds = time.perf_counter() - t0
        # The walk would unpack a checkpoint's saved tensors, i.e. run its recomputation.
        walked = None if under.kind == "checkpoint" else saved_activation_bytes(loss, exclude)
        t0 = time.perf_counter()
        loss.backward()
        _sync(device)
        seconds = forward_seconds + time.perf_counter() - t0
    return _FirstStep(loss, seconds, walked, _grads(under.model), reports)


def _memory_step(
    under: _UnderTest, inputs: tuple[torch.Tensor, ...], step_seed: int, device: torch.device
) -> tuple[StepMemory, int]:
    """A step under the allocator trace: its memory, and the bytes the forward left
    allocated besides the loss (what it saved for backward)."""
    _clear_grads(under.model)
    torch.manual_seed(step_seed)
    memory, loss = step_memory(lambda: under.fn(*inputs), lambda out: out.backward(), device)
    return memory, memory.after_forward_bytes - loss.untyped_storage().nbytes()


def _timed_steps(
    under: _UnderTest, inputs: tuple[torch.Tensor, ...], step_seed: int, device: torch.device, repeats: int
) -> list[float]:
    """Seconds of each of ``repeats`` forward+backward steps."""
    times = []
    for _ in range(repeats):
        _clear_grads(under.model)
        torch.manual_seed(step_seed)
        _sync(device)
        t0 = time.perf_counter()
        under.fn(*inputs).backward()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return times


def _median_and_iqr(times: list[float]) -> tuple[float, float]:
    quartiles = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return statistics.median(times), quartiles[2] - quartiles[0]


def _recorder_fields(recorder: RecordingPartitioner, *, compile_seconds: float) -> dict[str, object]:
    """What the recorded partitions hold, summed over the compiled graphs."""
    stats = recorder.total()
    return dict(
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
        compile_seconds=compile_seconds,
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
