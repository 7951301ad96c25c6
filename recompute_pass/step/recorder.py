"""Watches one step run: each compiled graph's forward and backward, as they happen.

The graphs' callables (``graphs.StepGraph``) report each forward here; the backward of a
call is found on its outputs' autograd node (AOTAutograd's ``CompiledFunctionBackward``,
one per call), whose pre- and post-hooks mark the backward's start and end, and the end
of the whole backward pass comes from the autograd engine's final callback, queued by
the first of those hooks. At each mark the meter reads the level (``meters``) and the
recorder notes which boundary tensors have died. The result is plain data
(``recording.StepRecording``).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from recompute_pass import torch_internals as ti
from recompute_pass.step.meters import AllocatorMeter, Meter, ProfilerMeter
from recompute_pass.step.recording import Call, Event, EventKind, PlanMemory, StepRecording

log = logging.getLogger(__name__)


class Recorder:
    """One step's events. ``on_end(recording)`` runs when its backward pass ends."""

    def __init__(self, device: torch.device, on_end: Callable[[StepRecording], None]) -> None:
        self.meter: Meter = AllocatorMeter(device) if device.type == "cuda" else ProfilerMeter()
        self.device = device
        self.on_end = on_end
        self.graphs: list[object] = []  # graph keys, in order of first run
        self.names: list[str] = []
        self.calls: list[Call] = []
        self.marks: list[tuple[EventKind, int, frozenset[int]]] = []
        self.tensors: list[weakref.ref[torch.Tensor]] = []  # boundary tensors
        self.sizes: list[int] = []
        self.index: dict[int, int] = {}  # id(tensor) -> boundary, while the tensor lives
        self.prologue: list[tuple[int, weakref.ref[torch.Tensor], bool]] = []
        # id(parameter) -> (the last call reading it, the parameter, its .grad's address)
        self.accumulating: dict[int, tuple[int, weakref.ref[torch.Tensor], int]] = {}
        self.backward_started = False
        self.ended = False
        self.from_step_start = False  # measured from the step's first module call
        self.unwatched_start = False  # no hook waited for the step's start (``StepRecording``)
        self.watch = ti.BackwardWatch(self._backward_returned)
        # Per provisional call until its backward ends: the references its saved tensors
        # hold on each boundary tensor it read (``_saves``).
        self.saves: dict[int, dict[int, int]] = {}
        self.frames = 0
        self.collecting = False

    @staticmethod
    def can_measure(device: torch.device) -> bool:
        return device.type == "cuda" or ProfilerMeter.available()

    def forward(
        self,
        key: object,
        name: str,
        args: Sequence[Any],
        run: Callable[..., Any],
        recorded: PlanMemory | None,
    ) -> Any:
        """Run ``run(*args)``, one call of graph ``key``, and mark its phases.
        ``recorded``: the memory of the provisional plan it runs (None: its final plan)."""
        if key not in self.graphs:
            self.graphs.append(key)
            self.names.append(name)
        inputs = tuple(self._boundary(a) for a in args)
        if not self.calls and not self.from_step_start:
            self._note_prologue(args)
        call = len(self.calls)
        graph = self.graphs.index(key)
        for value in args:  # the last call that reads a parameter is the first to give it a gradient
            if _storage(value) is not None and value.is_leaf and value.grad is not None:
                self.accumulating[id(value)] = (call, weakref.ref(value), value.grad.data_ptr())
        self.calls.append(Call(graph, False, inputs, (), None))
        counts = [_use_count(a) for a in args] if recorded is not None else []  # for ``_saves``
        self._mark(EventKind.FORWARD_START, call)
        outputs = run(*args)
        node = _backward_node(outputs)
        # Without a backward its memory is measured like eager code's.
        provisional = recorded is not None and node is not None
        recorded = recorded if provisional else None
        if recorded is not None:
            self.saves[call] = _saves(args, inputs, counts, recorded.saved_inputs, outputs)
        self._mark(EventKind.FORWARD_END, call)
        returned = tuple(self._boundary(o) for o in _flat(outputs))
        self.calls[call] = Call(graph, provisional, inputs, returned, recorded, node is not None, False)
        if node is not None:
            sizes = [_gradient_bytes(o) for o in _flat(outputs)]  # not the outputs: hooks must not hold them
            node.register_prehook(lambda grads: self._backward_start(call, sizes, grads))
            node.register_hook(lambda grads_in, grads_out: self._mark(EventKind.BACKWARD_END, call))
        return outputs

    def begin(self) -> None:
        """The step starts here (its first module call): everything it allocates from now
        on is measured, and nothing before it need be estimated."""
        self.from_step_start = True
        self._mark(EventKind.STEP_START, -1)

    def _backward_start(self, call: int, sizes: Sequence[int], grads: Sequence[object]) -> None:
        if self.ended:
            return
        self.backward_started = True
        made = sum(size for size, grad in zip(sizes, grads, strict=False) if grad is None)
        self.calls[call] = dataclasses.replace(self.calls[call], made_gradients=made, differentiated=True)
        self._mark(EventKind.BACKWARD_START, call)

    def _backward_returned(self) -> None:
        """The step ends when the backward pass that ran the recorded graphs' backward
        returns to its caller (a backward pass through other code goes on recording)."""
        if self.backward_started and not self.ended:
            self._end()

    def _mark(self, kind: EventKind, call: int) -> None:
        if self.ended:
            return
        if not self.marks:
            self.watch.install()
            self.frames = ti.frames_compiled()
            # A collection inside the step frees garbage at a moment later steps need not
            # repeat: the recording is of the step without one (its upper bound).
            self.collecting = gc.isenabled()
            gc.disable()
        self.meter.mark()
        if kind is EventKind.BACKWARD_END:
            self.saves.pop(call, None)  # its saved tensors are released
        dead = frozenset(i for i, ref in enumerate(self.tensors) if ref() is None) | self._only_saved()
        self.marks.append((kind, call, dead))

    def _only_saved(self) -> frozenset[int]:
        """Boundary tensors nothing holds but the open provisional calls' saved tensors:
        dead to the step but for those plans (``ti.held_only_by``)."""
        held: dict[int, int] = {}
        for saves in self.saves.values():
            for boundary, count in saves.items():
                held[boundary] = held.get(boundary, 0) + count
        return frozenset(b for b, count in held.items() if ti.held_only_by(self.tensors[b], count))

    def abort(self) -> None:
        """Stop watching without a recording (a step that never ran its backward)."""
        if not self.ended and self.marks:
            self._release()
            self.meter.stop()
        self.ended = True

    def _release(self) -> None:
        self.ended = True
        self.watch.remove()
        if self.collecting:
            gc.enable()

    def _end(self) -> None:
        self._mark(EventKind.END, -1)
        self._release()
        points = self.meter.stop()
        prologue = self._prologue_bytes()
        for call, size in self._accumulated().items():
            self.calls[call] = dataclasses.replace(self.calls[call], accumulated=size)
        events = tuple(
            Event(kind, call, level + prologue, peak + prologue, dead)
            for (kind, call, dead), (level, peak) in zip(self.marks, points, strict=True)
        )
        recording = StepRecording(
            graphs=tuple(self.names),
            calls=tuple(self.calls),
            events=events,
            boundaries=tuple(self.sizes),
            prologue_bytes=prologue,
            device=self.device.type,
            compiles=ti.frames_compiled() - self.frames,
            accumulating=bool(self.accumulating),
            unwatched_start=self.unwatched_start and not self.from_step_start,
        )
        self.on_end(recording)

    def _accumulated(self) -> dict[int, int]:
        """Per call, the bytes of the gradients its backward added into a ``.grad`` in
        place (the same storage after as before; one replaced was allocated in the step,
        and the profile counts it)."""
        found: dict[int, int] = {}
        for call, ref, address in self.accumulating.values():
            parameter = ref()
            grad = parameter.grad if parameter is not None else None
            if grad is not None and grad.data_ptr() == address:
                found[call] = found.get(call, 0) + grad.numel() * grad.element_size()
        return found

    def _boundary(self, value: object) -> int | None:
        """The boundary index of a tensor argument (the same tensor, the same index; None:
        not a plain tensor, whose storage says its bytes)."""
        storage = _storage(value)
        if storage is None:
            return None
        known = self.index.get(id(value))
        if known is not None and self.tensors[known]() is value:
            return known
        self.index[id(value)] = len(self.tensors)
        self.tensors.append(weakref.ref(value))  # type: ignore[arg-type]
        self.sizes.append(storage[1])
        return len(self.tensors) - 1

    def _note_prologue(self, args: Sequence[Any]) -> None:
        """What the step held before its first graph ran: the first graph's activation
        inputs (tensors autograd made this step, or that die with it; not the parameters,
        buffers and batch, which outlive it)."""
        seen: set[int] = set()
        for value in args:
            storage = _storage(value)
            if storage is None or isinstance(value, torch.nn.Parameter) or storage[0] in seen:
                continue
            assert isinstance(value, torch.Tensor)
            if value.is_leaf and value.requires_grad:
                continue
            seen.add(storage[0])
            self.prologue.append((storage[1], weakref.ref(value), value.grad_fn is not None))

    def _prologue_bytes(self) -> int:
        return sum(size for size, ref, made in self.prologue if made or ref() is None)


def _storage(value: object) -> tuple[int, int] | None:
    """A plain tensor's storage: its address and bytes (None for anything else: a tensor
    subclass wrapping others, a fake tensor, a non-tensor)."""
    if type(value) not in (torch.Tensor, torch.nn.Parameter):
        return None
    storage = value.untyped_storage()  # type: ignore[attr-defined]
    return storage.data_ptr(), storage.nbytes()


def _use_count(value: object) -> int | None:
    """References to a plain tensor's implementation (None: not a plain tensor)."""
    return ti.implementation_uses(value) if _storage(value) is not None else None  # type: ignore[arg-type]


def _saves(
    args: Sequence[Any],
    inputs: Sequence[int | None],
    before: Sequence[int | None],
    positions: frozenset[int],
    outputs: object,
) -> dict[int, int]:
    """The references a call's saved tensors took on its inputs at ``positions`` (those
    whose storage its plan saves): what their count rose by over the forward. An input an
    output shares storage with is left out: the output, not a save, may hold it."""
    returned = {s[0] for o in _flat(outputs) if (s := _storage(o)) is not None}
    saves: dict[int, int] = {}
    for k in sorted(positions):
        if k >= len(args) or inputs[k] is None or before[k] is None or inputs[k] in saves:
            continue
        storage = _storage(args[k])
        if storage is None or storage[0] in returned:
            continue
        rise = ti.implementation_uses(args[k]) - before[k]
        if rise > 0:
            saves[inputs[k]] = rise
    return saves


def _gradient_bytes(output: object) -> int:
    """Bytes of the gradient an output would get (0: none, it needs no gradient)."""
    if not isinstance(output, torch.Tensor) or not output.requires_grad:
        return 0
    return output.numel() * output.element_size()


def _flat(outputs: object) -> tuple[object, ...]:
    return tuple(outputs) if isinstance(outputs, list | tuple) else (outputs,)


def _backward_node(outputs: object) -> Any:
    """The call's ``CompiledFunctionBackward`` node: on an output, or one step behind a
    view AOTAutograd regenerated."""
    tensors = [o for o in _flat(outputs) if isinstance(o, torch.Tensor)]
    for tensor in tensors:
        node = tensor.grad_fn
        if node is not None and "CompiledFunction" in type(node).__name__:
            return node
    for tensor in tensors:
        node = tensor.grad_fn
        for inner, _ in getattr(node, "next_functions", ()) if node is not None else ():
            if inner is not None and "CompiledFunction" in type(inner).__name__:
                return inner
    return None
