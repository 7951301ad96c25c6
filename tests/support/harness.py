"""Run one training step eagerly or compiled, from the same seed, and compare."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.harness import hf_models
from benchmarks.harness.meters import saved_activation_bytes, step_memory
from benchmarks.harness.models import ModelCase
from recompute_pass import PartitionReport, capture_reports
from recompute_pass import torch_internals as ti

# fp32 on CPU: recomputation reorders nothing, but a recomputed value may be produced by
# a differently fused kernel; 1e-5 relative (plus 1e-6 absolute) covers the rounding.
RTOL, ATOL = 1e-5, 1e-6


@dataclass
class Step:
    loss: torch.Tensor
    grads: dict[str, torch.Tensor]
    saved_bytes: int  # activations held for backward, parameters and buffers excluded
    reports: list[PartitionReport]


@contextlib.contextmanager
def autograd_cache_off(**inductor: Any) -> Iterator[None]:
    """AOTAutograd's cache off, so that every compile calls the partitioner (a hit calls
    none), with ``inductor`` config patched.

    Not ``force_disable_caches``: that also gives every compile a fresh, empty cache folder,
    so each one built every C++ kernel again (0.85 s each, 40% of a small model's compile
    on 2 cores). Inductor's FX-graph and kernel caches are keyed by the
    partitioned graphs and the kernels' source, so a hit returns what the compile would
    make; tests that compile one plan on several routes share it. A test reading what
    Inductor's lowering reports (the memory audit's log) passes ``fx_graph_cache=False``:
    a hit lowers nothing."""
    with ti.inductor_config.patch(**inductor), ti.functorch_config.patch(enable_autograd_cache=False):
        yield


def run_step(
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    *,
    backend: Callable[..., Any] | str | None = None,
    seed: int = 0,
    dynamic: bool | None = None,
) -> Step:
    """One forward+backward of a copy of ``model``; ``backend=None`` runs eagerly."""
    model = copy.deepcopy(model)
    fn: Callable[..., torch.Tensor] = model
    if backend is not None:
        torch.compiler.reset()
        fn = torch.compile(model, backend=backend, dynamic=dynamic)
    with capture_reports() as reports:
        torch.manual_seed(seed)
        loss = fn(*inputs)
    static = [*model.parameters(), *model.buffers()]
    saved = saved_activation_bytes(loss, exclude=static)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    return Step(loss.detach(), grads, saved, reports)


def hf_llama_lora_all_and_tokens(seq: int) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A 2-layer HF Llama with peft LoRA (scaling 2) on every linear layer, and its batch."""
    torch.manual_seed(0)
    model = hf_models.llama(vocab=128, seq=seq, dim=64, heads=4, hidden=176, layers=2)
    model = hf_models.lora(model, hf_models.LORA_ALL_LINEAR["llama"])
    tokens = torch.randint(0, 128, (2, seq))
    return model, (tokens, tokens)


def case_inputs(case: ModelCase, batch: int = 4, seed: int = 1) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(seed)
    return case.inputs(batch)


def build(case: ModelCase, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return case.build()


def assert_same_step(actual: Step, expected: Step, *, rtol: float = RTOL, atol: float = ATOL) -> None:
    torch.testing.assert_close(actual.loss, expected.loss, rtol=rtol, atol=atol)
    assert actual.grads.keys() == expected.grads.keys()
    for name, grad in expected.grads.items():
        torch.testing.assert_close(
            actual.grads[name], grad, rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}"
        )


def compiled_step_peak(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], backend: Callable[..., Any], **inductor: Any
) -> tuple[int, PartitionReport]:
    """Measured peak of the step after the compiling one (caches off, ``inductor`` config
    patched), and the compile's one report."""
    peak, report, _ = compiled_step(model, inputs, backend, **inductor)
    return peak, report


def compiled_step(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], backend: Callable[..., Any], **inductor: Any
) -> tuple[int, PartitionReport, Step]:
    """``compiled_step_peak``, and the measured step itself (its loss and gradients, to
    compare with eager's without compiling the model again)."""
    with autograd_cache_off(**inductor):
        torch.compiler.reset()
        compiled = torch.compile(model, backend=backend)
        with capture_reports() as reports:
            compiled(*inputs).backward()
        for parameter in model.parameters():
            parameter.grad = None
        memory, loss = step_memory(lambda: compiled(*inputs), lambda out: out.backward(), torch.device("cpu"))
    (report,) = reports
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    for parameter in model.parameters():
        parameter.grad = None  # the model as it came (a reference step copies it)
    return memory.peak_bytes, report, Step(loss.detach(), grads, 0, list(reports))
