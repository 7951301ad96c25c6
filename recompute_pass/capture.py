"""Capture a training step's joint graph once, from a ``dynamic=True`` trace, without
compiling it.

``fit_longest`` partitions one joint graph at many sizes: the graph is symbolic in them, so
one trace serves every size (``plan_sizes``). The capture is the joint graph exactly as a
real compile hands it to the partitioner: through Inductor (after its joint-graph passes)
or through AOTAutograd alone for the path without codegen. The capturing partitioner
stops the compile as soon as it has its copy, so no kernel is generated.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from recompute_pass import torch_internals as ti
from recompute_pass.options import RecomputeOptions
from recompute_pass.partitioner import Priced, partition, price
from recompute_pass.report.record import PartitionReport


class NotOneGraph(ValueError):
    """The step compiles to several graphs (a graph break), or none."""


class _Captured(Exception):
    """Raised by the capturing partitioner: the compile has given what was wanted."""


@dataclass(frozen=True)
class CapturedStep:
    """A joint graph as the partitioner receives it, ready to be partitioned many times."""

    module: fx.GraphModule
    num_fwd_outputs: int
    static_lifetime_input_indices: tuple[int, ...]
    compiler: str | None  # "inductor" when captured through Inductor

    def copy(self) -> fx.GraphModule:
        """A fresh copy: partitioning mutates the module it is given."""
        graph = fx.Graph()
        graph.output(graph.graph_copy(self.module.graph, {}))
        return fx.GraphModule(self.module, graph)

    def shape_env(self) -> ti.ShapeEnv | None:
        vals = [n.meta.get("val") for n in self.module.graph.find_nodes(op="placeholder")]
        fake_mode = ti.detect_fake_mode(vals)
        return fake_mode.shape_env if fake_mode is not None else None

    def price(self, options: RecomputeOptions) -> Priced:
        """A copy read and costed, as the real compile's partitioner would."""
        return price(
            self.copy(),
            num_fwd_outputs=self.num_fwd_outputs,
            static_lifetime_input_indices=self.static_lifetime_input_indices,
            options=options,
            compiler=self.compiler,
        )

    def partition(self, options: RecomputeOptions) -> PartitionReport:
        """Partition a copy as the real compile would, and return only the report."""
        _, _, report = partition(
            self.copy(),
            num_fwd_outputs=self.num_fwd_outputs,
            static_lifetime_input_indices=self.static_lifetime_input_indices,
            options=options,
            compiler=self.compiler,
        )
        return report


class _CapturingPartitioner(ti.CustomPartitionerFn):
    def __init__(self, found: list[CapturedStep], compiler: str | None) -> None:
        self.found = found
        self.compiler = compiler
        self.key = uuid.uuid4().hex  # never a cache hit: every capture must reach us

    def uuid(self) -> str:
        return f"recompute_pass-capture-{self.key}"

    def __call__(self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any) -> Any:
        graph = fx.Graph()
        graph.output(graph.graph_copy(gm.graph, {}))
        static = tuple(kwargs.get("static_lifetime_input_indices") or ())
        self.found.append(
            CapturedStep(fx.GraphModule(gm, graph), kwargs["num_fwd_outputs"], static, self.compiler)
        )
        raise _Captured


def capture_step(
    model: Callable[..., torch.Tensor], inputs: Sequence[object], *, inductor: bool
) -> CapturedStep:
    """The joint graph of ``model(*inputs)`` (a scalar loss) traced ``dynamic=True``.

    The step must compile to one graph (``fullgraph``; ``NotOneGraph`` otherwise): a graph
    break would leave a step whose peak no single graph predicts. Caches are off for the
    capture.
    """

    def backend(gm: fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Any:
        return _compile_to_partitioner(gm, list(example_inputs), capturer, None)

    def step() -> None:
        compiled = torch.compile(model, backend=backend, dynamic=True, fullgraph=True)
        compiled(*inputs).backward()  # the backward is reached only if nothing was captured

    capturer = _CapturingPartitioner([], "inductor" if inductor else None)
    try:
        return _captured(capturer, step)
    except ti.GraphBreak as error:
        raise NotOneGraph(f"the step does not compile to one graph ({type(error).__name__})") from error


def capture_compiled(
    gm: fx.GraphModule,
    example_inputs: list[object],
    *,
    inductor: bool,
    config_patches: dict[str, Any] | None = None,
) -> CapturedStep:
    """The joint graph a compile of ``gm`` hands its partitioner (through Inductor, after
    its joint-graph passes; or AOTAutograd's alone), the compile stopped there. Call it
    inside the graph's own compile contexts, as the compile it stands for."""
    capturer = _CapturingPartitioner([], "inductor" if inductor else None)
    return _captured(capturer, lambda: _compile_to_partitioner(gm, example_inputs, capturer, config_patches))


def _compile_to_partitioner(
    gm: fx.GraphModule, inputs: list[object], capturer: _CapturingPartitioner, patches: dict[str, Any] | None
) -> Any:
    """``gm`` compiled the capturer's way (Inductor's, or AOTAutograd's alone) as far as it goes."""
    if capturer.compiler == "inductor":
        with ti.inductor_config.patch(custom_partitioner_fn=capturer):
            return ti.compile_fx(gm, inputs, config_patches=patches)
    return ti.eager_aot_backend(capturer)(gm, inputs)


def _captured(capturer: _CapturingPartitioner, compile_it: Callable[[], object]) -> CapturedStep:
    """What ``capturer`` caught while ``compile_it()`` ran (caches off), exactly one graph."""
    try:
        with ti.inductor_config.patch(force_disable_caches=True):
            compile_it()
    except Exception as error:
        if not capturer.found or not _caused_by_capture(error):
            raise
    if len(capturer.found) != 1:
        raise NotOneGraph(f"the step compiled to {len(capturer.found)} joint graphs")
    return capturer.found[0]


def _caused_by_capture(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, _Captured):
            return True
        error = error.__cause__ or error.__context__
    return False
