"""One yardstick for every partitioner: stats read off the forward/backward graphs it returns.

``RecordingPartitioner`` wraps any partitioner (PyTorch's min-cut, with or without an
``activation_memory_budget``, or ours) and measures what it produced, the same way for all:

- saved bytes: forward outputs after ``num_fwd_outputs`` (what crosses to backward),
  counted with ``cost_model.tensor_bytes`` at the size hints; graph inputs are excluded:
  static-lifetime ones (parameters, buffers) entirely, user inputs kept apart in
  ``saved_input_bytes`` (our ``PartitionReport.saved_bytes`` counts those);
- recompute FLOPs: backward ``call_function`` nodes whose name is also a forward
  ``call_function`` node (extraction copies joint nodes under their names, so a node in
  both graphs is work done twice), costed with ``cost_model.node_cost`` (attention
  included, pointwise ops at one FLOP per element), and apart the FLOPs of the GEMMs,
  convolutions and attention among them (what a fused pointwise recompute does not cost);
- estimated recompute time: ``cost_model.estimate_runtime`` of those nodes, pointwise ops
  and views fused (their arithmetic only), as our partitioner prices them;
- the partitioner's wall time.

It plugs into Inductor as ``custom_partitioner_fn`` and into ``aot_autograd`` as
``partition_fn`` (same call signature).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import fx

from cost_model import MATRIX_KINDS, DeviceProfile, SizeHints, estimate_runtime, node_cost, tensor_bytes
from recompute_pass import torch_internals as ti
from recompute_pass.graph.costing import fuses

Partitioner = Callable[..., tuple[fx.GraphModule, fx.GraphModule]]


@dataclass(frozen=True)
class PartitionStats:
    """What one partitioned graph pair costs; sums over graphs with ``+``."""

    graphs: int
    joint_nodes: int  # size of the joint graph handed to the partitioner
    saved_bytes: int  # activations crossing to backward, graph inputs excluded
    saved_input_bytes: int  # user inputs (not parameters or buffers) handed to backward
    saved_tensors: int
    recompute_flops: int
    recompute_heavy_flops: int  # GEMM, convolution and attention among them
    recompute_ops: int
    recompute_seconds: float  # cost model, fused pointwise
    forward_flops: int
    backward_flops: int
    partition_seconds: float  # wall time of the wrapped partitioner

    def __add__(self, other: PartitionStats) -> PartitionStats:
        return PartitionStats(
            *(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__)  # type: ignore[arg-type]
        )

    @classmethod
    def empty(cls) -> PartitionStats:
        return cls(0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0, 0, 0.0)


def _call_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def _flops(nodes: Sequence[fx.Node], hints: SizeHints) -> int:
    return sum(node_cost(n).evaluate(hints).flops for n in nodes)


def graph_stats(
    forward: fx.GraphModule,
    backward: fx.GraphModule,
    *,
    num_fwd_outputs: int,
    static_inputs: frozenset[str] = frozenset(),
    device: DeviceProfile | str = "cpu",
    partition_seconds: float = 0.0,
    joint_nodes: int = 0,
) -> PartitionStats:
    """Stats of a partition, from the graphs alone."""
    hints = SizeHints.from_graph(forward)
    (outputs,) = forward.graph.find_nodes(op="output")
    saved = [n for n in outputs.args[0][num_fwd_outputs:] if isinstance(n, fx.Node)]
    activation = input_bytes = tensors = 0
    for node in dict.fromkeys(saved):
        if node.name in static_inputs:
            continue
        nbytes = hints.evaluate(tensor_bytes(node.meta.get("val")))
        tensors += nbytes > 0
        if node.op == "placeholder":
            input_bytes += nbytes
        else:
            activation += nbytes
    forward_nodes = _call_nodes(forward)
    backward_nodes = _call_nodes(backward)
    forward_names = {n.name for n in forward_nodes}
    # A replayed draw runs in backward as ``run_with_rng_state`` (a new name): recompute too.
    recomputed = [n for n in backward_nodes if n.name in forward_names or n.target is ti.run_with_rng_state]
    concrete = [node_cost(n).evaluate(hints) for n in recomputed]
    return PartitionStats(
        graphs=1,
        joint_nodes=joint_nodes,
        saved_bytes=activation,
        saved_input_bytes=input_bytes,
        saved_tensors=tensors,
        recompute_flops=sum(c.flops for c in concrete),
        recompute_heavy_flops=sum(c.flops for c in concrete if c.kind in MATRIX_KINDS),
        recompute_ops=len(recomputed),
        recompute_seconds=sum(
            estimate_runtime(node_cost(n), device, hints, fused=fuses(n)) for n in recomputed
        ),
        forward_flops=_flops(forward_nodes, hints),
        backward_flops=_flops(backward_nodes, SizeHints.from_graph(backward)),
        partition_seconds=partition_seconds,
    )


class RecordingPartitioner(ti.CustomPartitionerFn):
    """Delegates to ``inner`` and appends the ``PartitionStats`` of each call to ``stats``.

    ``uuid()`` is None: Inductor then skips its caches for the compile, so every compile
    really partitions (the benchmark also disables caches globally).
    """

    def __init__(self, inner: Partitioner, *, device: DeviceProfile | str = "cpu") -> None:
        self.inner = inner
        self.device = device
        self.stats: list[PartitionStats] = []

    def uuid(self) -> Any | None:
        return None

    def __call__(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        placeholders = list(gm.graph.find_nodes(op="placeholder"))
        static = frozenset(placeholders[i].name for i in kwargs.get("static_lifetime_input_indices") or ())
        joint_nodes = len(gm.graph.nodes)
        start = time.perf_counter()
        forward, backward = self.inner(gm, joint_inputs, **kwargs)
        seconds = time.perf_counter() - start
        self.stats.append(
            graph_stats(
                forward,
                backward,
                num_fwd_outputs=kwargs["num_fwd_outputs"],
                static_inputs=static,
                device=self.device,
                partition_seconds=seconds,
                joint_nodes=joint_nodes,
            )
        )
        return forward, backward

    def total(self) -> PartitionStats:
        total = PartitionStats.empty()
        for stats in self.stats:
            total = total + stats
        return total


class BudgetedMinCut:
    """PyTorch's partitioner with ``torch._functorch.config.activation_memory_budget`` set.

    ``budget=None`` leaves the config alone: plain ``torch.compile``.
    """

    def __init__(self, budget: float | None = None) -> None:
        self.budget = budget

    def __call__(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        kwargs.setdefault("compiler", "inductor")
        if self.budget is None:
            return ti.min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
        with ti.functorch_config.patch(activation_memory_budget=self.budget):
            return ti.min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
