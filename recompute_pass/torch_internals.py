"""Every private PyTorch name the ``recompute_pass`` package uses, in one place
(``cost_model/torch_internals.py`` is the cost model's).

Torch internals move between releases; a torch upgrade should touch this file only.
Checked against torch 2.13. ``tests/test_torch_internals.py`` fails loudly if a name
disappears.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import fx
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.debugging import get_nop_func
from torch._functorch import config as functorch_config
from torch._functorch._aot_autograd.utils import (
    _is_bwd_seed_offset,
    _is_fwd_seed_offset,
    _is_primal,
    _is_tangent,
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
from torch._inductor import config as inductor_config
from torch._inductor.compile_fx import compile_fx, select_decomp_table
from torch._inductor.custom_graph_pass import CustomPartitionerFn
from torch._inductor.graph import GraphLowering
from torch._ops import HigherOrderOperator
from torch.fx.experimental.proxy_tensor import is_sym_node

__all__ = [
    "CustomPartitionerFn",
    "HigherOrderOperator",
    "aot_autograd",
    "classify_nodes",
    "cleanup_recompute_tags",
    "compile_fx",
    "decide_layout_opt",
    "default_partition",
    "eager_aot_backend",
    "extract_fwd_bwd_modules",
    "extract_fwd_bwd_outputs",
    "force_save_bw_mutation_src",
    "force_save_collectives",
    "force_save_effectful_ops",
    "functorch_config",
    "fx_graph_cse",
    "inductor_config",
    "is_bwd_seed_offset",
    "is_fwd_seed_offset",
    "is_primal",
    "is_sym_node",
    "is_tangent",
    "min_cut_rematerialization_partition",
    "must_be_in_backward",
    "must_be_in_forward",
    "raise_getitems",
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


def decide_layout_opt(gm: fx.GraphModule) -> bool:
    """Whether Inductor will convert convolutions to channels-last in this training graph."""
    return GraphLowering.decide_layout_opt(gm, is_inference=False)


def eager_aot_backend(partition_fn: Callable[..., Any]) -> Callable[..., Any]:
    """AOTAutograd with Inductor's decompositions and no codegen (``aot_eager_decomp_partition``).

    The joint graph is the one Inductor would see minus Inductor's own joint-graph passes,
    so partitions can be tested in seconds instead of minutes of C++ compilation.
    """
    return aot_autograd(
        fw_compiler=get_nop_func(),
        bw_compiler=get_nop_func(),
        decompositions=select_decomp_table,
        partition_fn=partition_fn,
    )
