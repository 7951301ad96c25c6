"""AOTAutograd: the joint graph's bookkeeping, PyTorch's own partitioners and their
helpers, the inputs' descriptors, and the eager route (AOTAutograd without codegen).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import fx
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.debugging import get_nop_func
from torch._functorch import config as functorch_config
from torch._functorch._aot_autograd.descriptors import (
    PlainAOTInput,
    SubclassGetAttrAOTInput,
    SubclassSizeAOTInput,
    SubclassStrideAOTInput,
)
from torch._functorch._aot_autograd.utils import (
    _is_bwd_seed_offset,
    _is_fwd_seed_offset,
    _is_primal,
    _is_tangent,
    make_boxed_func,
)
from torch._functorch.compile_utils import fx_graph_cse, raise_getitems
from torch._functorch.partitioners import (
    _extract_fwd_bwd_modules,
    _extract_fwd_bwd_outputs,
    _must_be_in_backward,
    _must_be_in_forward,
    classify_nodes,
    cleanup_recompute_tags,
    default_partition,
    force_save_bw_mutation_src,
    force_save_collectives,
    force_save_effectful_ops,
    min_cut_rematerialization_partition,
    reordering_to_mimic_autograd_engine,
    thread_graphsafe_rng_from_hops,
)
from torch._inductor.compile_fx import (
    select_decomp_table,
)
from torch.fx.traceback import _get_memory_budget_annotation

__all__ = [
    "PlainAOTInput",
    "SubclassGetAttrAOTInput",
    "aot_autograd",
    "classify_nodes",
    "cleanup_recompute_tags",
    "default_partition",
    "eager_aot_backend",
    "extract_fwd_bwd_modules",
    "extract_fwd_bwd_outputs",
    "flat_static_input_indices",
    "force_save_bw_mutation_src",
    "force_save_collectives",
    "force_save_effectful_ops",
    "functorch_config",
    "fx_graph_cse",
    "inputs_written_back",
    "is_bwd_seed_offset",
    "is_fwd_seed_offset",
    "is_primal",
    "is_subgraph_body_call",
    "is_tangent",
    "min_cut_rematerialization_partition",
    "must_be_in_backward",
    "must_be_in_forward",
    "raise_getitems",
    "region_memory_budget",
    "reordering_to_mimic_autograd_engine",
    "select_decomp_table",
    "thread_graphsafe_rng_from_hops",
]


is_primal = _is_primal
is_tangent = _is_tangent
is_fwd_seed_offset = _is_fwd_seed_offset
is_bwd_seed_offset = _is_bwd_seed_offset
must_be_in_forward = _must_be_in_forward
must_be_in_backward = _must_be_in_backward
extract_fwd_bwd_modules = _extract_fwd_bwd_modules
extract_fwd_bwd_outputs = _extract_fwd_bwd_outputs


# The budget ``torch.autograd.graph.region_activation_memory_budget`` put on a node, or None.
region_memory_budget = _get_memory_budget_annotation


def is_subgraph_body_call(joint_inputs: Sequence[object]) -> bool:
    """Whether AOTAutograd is partitioning a higher-order op's body (``invoke_subgraph``).

    It calls the partitioner with no joint inputs there, and with no static-input indices
    (a TODO in ``_aot_autograd/graph_compile.py``); a whole graph always has inputs.
    """
    return len(joint_inputs) == 0


def inputs_written_back(graph: fx.Graph) -> list[fx.Node]:
    """The inputs the runtime writes after the forward: where a mutation is not kept in the
    graph, AOTAutograd returns the input's new value as an output (its descriptor an
    ``InputMutationAOTOutput``) and copies it into the input itself."""
    (output,) = graph.find_nodes(op="output")
    placeholders = graph.find_nodes(op="placeholder")
    written = []
    for desc in output.meta.get("desc") or ():
        mutated = getattr(desc, "mutated_input", None)
        if mutated is not None:
            written += [p for p in placeholders if p.meta.get("desc") == mutated]
    return written


def eager_aot_backend(
    partition_fn: Callable[..., Any],
    graph_compiler: Callable[[fx.GraphModule, str], Callable[..., Any]] | None = None,
) -> Callable[..., Any]:
    """AOTAutograd with Inductor's decompositions and no codegen (``aot_eager_decomp_partition``).

    The joint graph is the one Inductor would see minus Inductor's own joint-graph passes,
    so partitions can be tested in seconds instead of minutes of C++ compilation.
    ``graph_compiler(graph, "forward" | "backward")``, if given, returns what runs each
    partitioned graph (called with the graph's inputs unpacked), in place of the graph itself.
    """
    if graph_compiler is None:
        fw_compiler = bw_compiler = get_nop_func()
    else:
        fw_compiler, bw_compiler = (_boxed(graph_compiler, phase) for phase in ("forward", "backward"))
    return aot_autograd(
        fw_compiler=fw_compiler,
        bw_compiler=bw_compiler,
        decompositions=select_decomp_table,
        partition_fn=partition_fn,
    )


def _boxed(
    graph_compiler: Callable[[fx.GraphModule, str], Callable[..., Any]], phase: str
) -> Callable[..., Any]:
    def compile_graph(gm: fx.GraphModule, example_inputs: Sequence[object]) -> Callable[..., Any]:
        return make_boxed_func(graph_compiler(gm, phase))

    return compile_graph


_SUBCLASS_PARTS = (SubclassGetAttrAOTInput, SubclassSizeAOTInput, SubclassStrideAOTInput)


def flat_static_input_indices(primals: Sequence[fx.Node], indices: Sequence[int]) -> list[int]:
    """The static-lifetime indices among the joint graph's primals.

    Torch 2.13 passes the partitioner the static indices of the inputs *before* tensor
    subclasses (DTensor under tensor parallelism) are flattened into their parts, while the
    joint graph's primals are the parts: the indices then point at the wrong placeholders
    (a mesh tensor counted as a parameter, the last parameters as activations). Each
    primal's AOTAutograd descriptor names the input it came from, so map them back. Left
    as given when no primal is a subclass part, or when a descriptor is not understood.
    """
    descs = [node.meta.get("desc") for node in primals]
    if not any(isinstance(d, _SUBCLASS_PARTS) for d in descs):
        return list(indices)
    roots = []
    for desc in descs:
        while isinstance(desc, _SUBCLASS_PARTS):
            desc = desc.base
        if not isinstance(desc, PlainAOTInput):
            return list(indices)
        roots.append(desc.idx)
    outer = set(indices)
    if len(outer) > max(roots) + 1:  # already per primal: nothing to map
        return list(indices)
    return [i for i, root in enumerate(roots) if root in outer]
