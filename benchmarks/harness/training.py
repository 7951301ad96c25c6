"""One training step of a benchmark model: built from a seed, run eagerly for reference
gradients or under the system measured, and the two compared.

Shared by the studies, so that every one builds, steps and compares the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from benchmarks.harness.cases import BenchCase
from benchmarks.harness.meters import StepMemory, saved_activation_bytes, step_memory
from recompute_pass import PartitionReport, capture_reports
from recompute_pass import torch_internals as ti


def benchmark_settings() -> contextlib.AbstractContextManager[object]:
    """Caches off (every compile partitions); compiled dropout draws eager's masks."""
    return ti.inductor_config.patch(force_disable_caches=True, fallback_random=True)


def profile_name(device: torch.device) -> str:
    """The cost-model profile for estimates: the CPU one, or the GPU's (H100 if unknown)."""
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower()
    return next((p for p in ("gh200", "h200", "h100", "a100") if p in name), "h100")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clear_grads(model: nn.Module) -> None:
    for p in model.parameters():
        p.grad = None


def grads_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of every parameter's gradient, by name (a DTensor shard gathered whole: a
    collective, so every rank must call it)."""
    out = {}
    for name, p in model.named_parameters():
        grad = p.grad
        if grad is None:
            continue
        if hasattr(grad, "full_tensor"):
            grad = grad.full_tensor()
        out[name] = grad.detach().clone()
    return out


def relative_grad_diff(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> float:
    """Max |actual - expected| over all parameters, over the largest |expected| (inf when the
    two have different parameters)."""
    if actual.keys() != expected.keys():
        return float("inf")
    scale = max(g.abs().max().item() for g in expected.values()) or 1.0
    return max((actual[k] - g).abs().max().item() for k, g in expected.items()) / scale


def max_grad_diff(grads: dict[str, torch.Tensor], eager: dict[str, torch.Tensor]) -> float:
    """Max |grads - eager| over all parameters, absolute (inf when a gradient is missing, or
    one is there for a frozen parameter)."""
    if grads.keys() != eager.keys():
        return float("inf")
    return max((float((grads[n] - g).abs().max()) for n, g in eager.items()), default=0.0)


def build(case: BenchCase, seed: int, device: torch.device) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model, in training mode, and its inputs, each from its own seed."""
    torch.manual_seed(seed)
    base = case.build().to(device).train()
    torch.manual_seed(seed + 1)
    inputs = tuple(t.to(device) for t in case.inputs())
    return base, inputs


def eager_step(
    base: nn.Module, inputs: tuple[torch.Tensor, ...], step_seed: int
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and gradients of one eager step of a copy of ``base``: the reference."""
    reference = copy.deepcopy(base)
    torch.manual_seed(step_seed)
    loss = reference(*inputs)
    loss.backward()
    return loss, grads_of(reference)


@dataclass
class FirstStep:
    """The first step: it compiles, gives the gradients and the walked saved bytes."""

    loss: torch.Tensor
    seconds: float  # forward + backward, compilation included
    walked_bytes: int | None  # None where not walked
    grads: dict[str, torch.Tensor]
    reports: list[PartitionReport]


@dataclass(frozen=True)
class Steps:
    """One training step to run again and again: ``fn`` (eager, checkpointed or compiled)
    on ``inputs``, ``model`` holding the gradients, each step from ``seed``."""

    model: nn.Module
    fn: Callable[..., torch.Tensor]
    inputs: tuple[torch.Tensor, ...]
    seed: int
    device: torch.device

    def _start(self) -> None:
        clear_grads(self.model)
        torch.manual_seed(self.seed)

    def first(self, *, walk: bool = True) -> FirstStep:
        """Compiles; gradients to compare with eager; with ``walk``, the saved tensors
        walked before backward (parameters, buffers and inputs excluded)."""
        exclude = [*self.model.parameters(), *self.model.buffers(), *self.inputs]
        with capture_reports() as reports:
            self._start()
            t0 = time.perf_counter()
            loss = self.fn(*self.inputs)
            sync(self.device)
            forward_seconds = time.perf_counter() - t0
            walked = saved_activation_bytes(loss, exclude) if walk else None
            t0 = time.perf_counter()
            loss.backward()
            sync(self.device)
            seconds = forward_seconds + time.perf_counter() - t0
        return FirstStep(loss, seconds, walked, grads_of(self.model), list(reports))

    def memory(self) -> tuple[StepMemory, int]:
        """A step under the allocator's watch (``meters.step_memory``: the peak
        definition): its memory, and the bytes the forward left allocated besides the loss
        (what it saved for backward). ``.grad``s are None before it."""
        self._start()
        memory, loss = step_memory(lambda: self.fn(*self.inputs), lambda out: out.backward(), self.device)
        return memory, memory.after_forward_bytes - loss.untyped_storage().nbytes()

    def timed(self, repeats: int) -> list[float]:
        """Seconds of each of ``repeats`` forward+backward steps (synchronised on CUDA)."""
        times = []
        for _ in range(repeats):
            self._start()
            sync(self.device)
            t0 = time.perf_counter()
            self.fn(*self.inputs).backward()
            sync(self.device)
            times.append(time.perf_counter() - t0)
        return times


def median_and_iqr(times: list[float]) -> tuple[float, float]:
    quartiles = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return statistics.median(times), quartiles[2] - quartiles[0]


def measured_step(
    model: nn.Module, inputs: tuple[torch.Tensor, ...], step: Callable[..., torch.Tensor]
) -> tuple[int, dict[str, torch.Tensor], list[PartitionReport]]:
    """On CPU: the peak of the step after a first (compiling) one, its gradients, and the
    reports of the compile."""
    with capture_reports() as reports:
        step(*inputs).backward()
    clear_grads(model)
    memory, _ = step_memory(lambda: step(*inputs), lambda loss: loss.backward(), torch.device("cpu"))
    return memory.peak_bytes, grads_of(model), list(reports)


def peak_row(
    system: tuple[str, str, float | None],
    peak: int,
    grads: dict[str, torch.Tensor],
    eager: dict[str, torch.Tensor],
    report: object,
) -> dict[str, object]:
    """A study's row for ``system`` (model, system, budget): its measured and predicted
    peak (``report``'s, if any), the prediction's error and the gradients' largest
    difference from eager."""
    predicted = getattr(report, "predicted_peak_bytes", None)
    model, name, budget = system
    return {
        "model": model,
        "system": name,
        "budget": budget,
        "measured_peak": peak,
        "predicted_peak": predicted,
        "error": None if predicted is None else predicted / peak - 1,
        "grad_error": max_grad_diff(grads, eager),
    }


def token_inputs(args: argparse.Namespace, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The HF studies' ``(tokens, targets)`` at ``--batch`` x ``--seq`` (``args``: anything
    with ``batch``, ``seq`` and ``vocab``), the same in every run."""
    torch.manual_seed(1)
    size = (args.batch, args.seq)
    return torch.randint(0, args.vocab, size).to(device), torch.randint(0, args.vocab, size).to(device)
