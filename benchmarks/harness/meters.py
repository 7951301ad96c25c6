"""Run-time meters of a training step (peak, memory timeline, saved bytes, warnings
logged), shared by the tests and the benchmarks.

No dispatch mode is involved: under one (``FlopCounterMode``, say), Dynamo skips the
compiled frame and what is measured is eager. FLOPs are counted on graphs instead.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
from torch.autograd.graph import Node
from torch.profiler import ProfilerActivity, profile, record_function

# No profiler noise: torch 2.13's kineto prints ``USDT: ... profiler_start`` and
# ``profiler_stop`` on stderr at every profile's start and stop (its USDT messages, log
# level 5). It reads its lowest level to print from ``KINETO_LOG_LEVEL`` once, when a
# process first profiles, so the meters set it above USDT on import, before any profile
# (and worker processes inherit it). A level the user set is kept.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")


def _saved_tensors(node: Node) -> list[torch.Tensor]:
    try:  # custom Functions, the compiled step among them
        saved = list(node.saved_tensors)  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        saved = []
    for name in dir(node):  # built-in autograd nodes expose ``_saved_<arg>``
        if name.startswith("_saved_") and not name.startswith("_saved_tensors"):
            value = getattr(node, name, None)
            if isinstance(value, torch.Tensor):
                saved.append(value)
            elif isinstance(value, tuple | list):
                saved += [v for v in value if isinstance(v, torch.Tensor)]
    return saved


def saved_activation_bytes(output: torch.Tensor, exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of storage the autograd graph behind ``output`` holds for backward.

    Walks ``output.grad_fn`` and every node behind it; storages shared by several saved
    tensors count once, and storages of ``exclude`` (parameters, inputs) not at all.
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    storages: dict[int, int] = {}
    seen: set[Node] = set()
    stack = [output.grad_fn] if output.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for tensor in _saved_tensors(node):
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in skip:
                storages[storage.data_ptr()] = storage.nbytes()
        stack += [next_node for next_node, _ in node.next_functions if next_node is not None]
    return sum(storages.values())


@dataclass(frozen=True)
class StepMemory:
    """Allocator view of one forward+backward, relative to the level when it started."""

    peak_bytes: int  # highest level during the step
    after_forward_bytes: int  # level when the forward returned: what it left allocated


_BACKWARD_MARK = "benchmarks.harness.meters.backward"


def step_memory(
    forward: Callable[[], torch.Tensor], backward: Callable[[torch.Tensor], None], device: torch.device
) -> tuple[StepMemory, torch.Tensor]:
    """Run ``backward(forward())`` and measure allocations; returns the loss too.

    CUDA: ``torch.cuda.max_memory_allocated``/``memory_allocated``. CPU (no allocator
    statistics): the profiler's allocation events (positive: allocation, negative: free),
    summed in time order; the backward starts at a ``record_function`` mark.
    """
    if device.type == "cuda":
        with _no_collection():
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            start = torch.cuda.memory_allocated(device)
            loss = forward()
            torch.cuda.synchronize(device)
            after = torch.cuda.memory_allocated(device) - start
            backward(loss)
            torch.cuda.synchronize(device)
        return StepMemory(torch.cuda.max_memory_allocated(device) - start, after), loss
    timeline, loss = step_timeline(forward, backward)
    peak = max([0, *(level for _, level in timeline)])  # 0: the level at the start
    after = next((level for phase, level in reversed(timeline) if phase == "forward"), 0)
    return StepMemory(peak, after), loss


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """No garbage collection inside the measured step: a collection there may free tensors
    an earlier step left in reference cycles, and the profiler would count those frees.
    (Seen once: ``tests/inductor/test_fit.py`` measured a peak 1,016 B under its exact prediction
    in the full suite, and the prediction to the byte alone.)"""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def step_timeline(
    forward: Callable[[], torch.Tensor], backward: Callable[[torch.Tensor], None]
) -> tuple[list[tuple[str, int]], torch.Tensor]:
    """CPU: the level after each allocation event of ``backward(forward())``, with the
    phase it falls in, relative to the level at the start (the profiler's allocation
    events, positive: allocation, negative: free, summed in time order)."""
    with _no_collection(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = forward()
        with record_function(_BACKWARD_MARK):
            backward(loss)
    events = prof.profiler.kineto_results.events()  # type: ignore[union-attr]
    (mark,) = (e.start_ns() for e in events if e.name() == _BACKWARD_MARK)
    allocations = sorted(
        (e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]" and e.device_type().name == "CPU"
    )
    level = 0
    timeline: list[tuple[str, int]] = []
    for ns, nbytes in allocations:
        level += nbytes
        timeline.append(("forward" if ns < mark else "backward", level))
    return timeline, loss


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def warnings_logged(logger: str = "recompute_pass") -> Iterator[list[str]]:
    """The WARNING records of ``logger`` (and its children) logged inside the block."""
    handler = _Warnings()
    log = logging.getLogger(logger)
    log.addHandler(handler)
    try:
        yield handler.messages
    finally:
        log.removeHandler(handler)
