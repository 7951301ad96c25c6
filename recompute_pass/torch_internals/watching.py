"""The running step, as the step planner watches it: the autograd engine's end-of-pass
callback, a CPU memory profile with marks, and Dynamo's compile contexts kept for a
compile after the backend returned."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence

import torch
from torch._functorch import config as _functorch_config
from torch._guards import CompileContext, TracingContext, compile_context, tracing
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.profiler import ProfilerActivity, profile, record_function

__all__ = [
    "BackwardWatch",
    "CompileContexts",
    "MemoryProfile",
    "NextModuleCall",
    "after_backward",
    "backward_compiled_with_forward",
    "fake_inputs",
    "frames_compiled",
    "held_only_by",
    "implementation_uses",
    "recompile_limit_hits",
    "profiler_enabled",
    "queue_engine_callback",
]

_MARK = "recompute_pass.step.mark."


def held_only_by(ref: Callable[[], torch.Tensor | None], references: int) -> bool:
    """Whether nothing holds the weakly referenced tensor but ``references`` C++ references
    taken on it (a compiled graph's saved tensors): no Python reference, no other C++ one
    (an eager node's saved tensor, a view's base). A tensor C++ holds keeps its Python
    object alive (with one reference of its own, so its weak reference cannot tell), and
    ``sys.getrefcount`` counts that one beside the local here and its own argument. A view
    is never taken for dead (its base may live on)."""
    tensor = ref()
    if tensor is None or tensor._is_view():
        return False
    uses = implementation_uses(tensor)
    python = sys.getrefcount(tensor) - 2 - (1 if uses > 1 else 0)
    return python == 0 and uses - 1 == references


def implementation_uses(tensor: torch.Tensor) -> int:
    """References to a tensor's implementation (its Python object's among them)."""
    return tensor._use_count()


def frames_compiled() -> int:
    """How many frames Dynamo has compiled (or tried to) in this process."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["total"])


class NextModuleCall:
    """Calls ``fired(args)`` at the next module call that runs eagerly (a global forward
    pre-hook, removed as it fires), or never.

    Dynamo must not see it: it would trace the hook (and the planner behind it) into a
    graph and guard on it. So it is removed when Dynamo starts compiling a frame, and
    ``torch.compile(module)``'s warning about global hooks (which fire twice on an
    ``OptimizedModule``; this one fires once) is silenced while it is set."""

    _active: NextModuleCall | None = None
    _WARNING = r"Using `torch.compile\(module\)` when there are global hooks"

    def __init__(self, fired: Callable[[object], None]) -> None:
        _register_compile_start()
        if NextModuleCall._active is not None:
            NextModuleCall._active.remove()
        self._fired = fired
        self._handle = torch.nn.modules.module.register_module_forward_pre_hook(self._pre_forward)
        warnings.filterwarnings("ignore", message=self._WARNING, category=UserWarning)
        self._filter = warnings.filters[0]
        NextModuleCall._active = self

    def _pre_forward(self, module: object, args: object) -> None:
        if torch.compiler.is_compiling():  # traced by a capture that ran no compile start
            return
        self.remove()
        self._fired(args)

    def remove(self) -> None:
        if NextModuleCall._active is not self:
            return
        NextModuleCall._active = None
        self._handle.remove()
        with contextlib.suppress(ValueError):  # a warnings.catch_warnings() restored the filters
            warnings.filters.remove(self._filter)
            warnings._filters_mutated()  # type: ignore[attr-defined]


def _register_compile_start() -> None:
    """Registered again whenever missing: ``torch.compiler.reset()`` clears Dynamo's
    compile callbacks."""
    from torch._dynamo.callback import callback_handler

    if _compile_starts not in callback_handler.start_callbacks:
        callback_handler.register_start_callback(_compile_starts)


def _compile_starts(_: object) -> None:
    if NextModuleCall._active is not None:
        NextModuleCall._active.remove()


def recompile_limit_hits() -> int:
    """How many times Dynamo has hit its recompile limit in this process: each time a
    frame runs uncompiled from then on."""
    from torch._dynamo.utils import counters

    return sum(n for reason, n in counters["unimplemented"].items() if "recompile limit" in reason)


def profiler_enabled() -> bool:
    """Whether a profiler runs on this thread (only one may)."""
    return bool(torch.autograd.profiler._is_profiler_enabled)


def queue_engine_callback(callback: Callable[[], None]) -> None:
    """Run ``callback`` when the running backward pass ends (call it inside a backward hook)."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


class BackwardWatch:
    """``on_return()`` runs each time an outermost backward pass (``backward()``,
    ``autograd.grad``) returns to its caller, while installed: on the caller's own thread,
    outside the autograd engine. (A profiler stopped inside the engine, in a final
    callback, stays enabled for the caller's thread: the engine restores the thread-local
    state it started from.)"""

    def __init__(self, on_return: Callable[[], None]) -> None:
        self.on_return = on_return
        self.depth = 0
        self.original: Callable[..., object] | None = None

    def install(self) -> None:
        if self.original is None:
            self.original = torch.autograd._engine_run_backward
            torch.autograd._engine_run_backward = self._run

    def remove(self) -> None:
        if self.original is not None and torch.autograd._engine_run_backward == self._run:
            torch.autograd._engine_run_backward = self.original
        self.original = None

    def _run(self, *args: object, **kwargs: object) -> object:
        assert self.original is not None
        self.depth += 1
        try:
            result = self.original(*args, **kwargs)
        finally:
            self.depth -= 1
        if self.depth == 0:
            self.on_return()
        return result


def after_backward(outputs: object, callback: Callable[[], None]) -> None:
    """Run ``callback`` when a backward pass through ``outputs`` ends."""
    node = next((t.grad_fn for t in _tensors(outputs) if t.grad_fn is not None), None)
    if node is not None:
        node.register_prehook(lambda grads: queue_engine_callback(callback))


def _tensors(outputs: object) -> list[torch.Tensor]:
    values = outputs if isinstance(outputs, list | tuple) else (outputs,)
    return [v for v in values if isinstance(v, torch.Tensor)]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Kineto writes a line to stderr when a profiler starts and stops (``USDT: ...
    profiler_start``), whatever its log level once initialised; a library must print
    nothing, so file descriptors 1 and 2 point to /dev/null for those calls."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
            yield
    finally:
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


class MemoryProfile:
    """A CPU memory profile of part of a step, with numbered marks."""

    def __init__(self, session: profile) -> None:
        self.session = session

    @staticmethod
    def start() -> MemoryProfile:
        session = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        before = torch.empty(64, dtype=torch.uint8)  # a block allocated before the profile
        with _quiet():
            session.__enter__()
            # Freeing it draws, here and unseen, the CPU allocator's once-per-process
            # warning about such blocks, which a step's frees would otherwise print.
            del before
        return MemoryProfile(session)

    def mark(self, index: int) -> None:
        with record_function(f"{_MARK}{index}"):
            pass

    def stop(self) -> tuple[list[int], list[tuple[int, int]]]:
        """Each mark's time, in mark order, and (time, bytes) of each CPU allocation
        (negative: a free)."""
        with _quiet():
            self.session.__exit__(None, None, None)
        events = self.session.profiler.kineto_results.events()  # type: ignore[union-attr]
        marks = {int(e.name()[len(_MARK) :]): e.start_ns() for e in events if e.name().startswith(_MARK)}
        allocations = [
            (e.start_ns(), e.nbytes())
            for e in events
            if e.name() == "[memory]" and e.device_type().name == "CPU"
        ]
        return [marks[i] for i in sorted(marks)], allocations


class CompileContexts:
    """Dynamo's tracing and compile contexts of a graph, kept while its backend runs and
    restored for a compile after it returned (as AOTAutograd's lazy backward compile
    does): the fake mode its inputs live in, its shape environment, its compile id."""

    def __init__(self, tracing_context: TracingContext | None, compile: CompileContext | None) -> None:
        self.tracing = tracing_context
        self.compile = compile

    @staticmethod
    def current() -> CompileContexts:
        return CompileContexts(TracingContext.try_get(), CompileContext.try_get())

    @contextlib.contextmanager
    def restored(self) -> Iterator[None]:
        with tracing(self.tracing), compile_context(self.compile):
            yield


def fake_inputs(inputs: Sequence[object]) -> list[object]:
    """The inputs as fake tensors of the compile's fake mode (those Dynamo made for them):
    a compile after the step needs their metadata, not the step's activations."""
    context = TracingContext.try_get()
    mode = context.fake_mode if context is not None and context.fake_mode is not None else FakeTensorMode()
    return [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs]


def backward_compiled_with_forward() -> contextlib.AbstractContextManager[None]:
    """AOTAutograd compiles the backward with the forward, not at the first backward: a
    compile inside a recorded step would be counted as the step's memory."""
    return _functorch_config.patch(force_non_lazy_backward_lowering=True)
