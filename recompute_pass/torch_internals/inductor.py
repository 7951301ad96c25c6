"""Inductor's lowering and scheduler, read without generating code (the memory plan
the partitioner predicts the peak from), and our ``store`` op's lowering."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import fx
from torch._guards import detect_fake_mode
from torch._inductor import config as inductor_config
from torch._inductor import ir as inductor_ir
from torch._inductor import lowering as inductor_lowerings
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.wrapper import buffer_reuse_key, can_match_buffer_size
from torch._inductor.compile_fx import (
    _recursive_post_grad_passes,
    _recursive_record_original_output_strides,
    fake_tensor_prop,
)
from torch._inductor.debug import DebugContext
from torch._inductor.fx_passes.post_grad import noop_registry, view_to_reshape
from torch._inductor.graph import GraphLowering
from torch._inductor.memory import (
    compute_size_for_scheduler_buffer,
    estimate_peak_memory,
    get_freeable_input_buf,
)
from torch._inductor.scheduler import NopKernelSchedulerNode, Scheduler, SchedulerNode
from torch._inductor.utils import is_pointwise_use
from torch._inductor.virtualized import V
from torch._ops import OpOverload

__all__ = [
    "CPP_MAX_KERNEL_GROUP_ARGS",
    "GraphLowering",
    "NopKernelSchedulerNode",
    "SCHEDULER_CONFIG",
    "Scheduler",
    "SchedulerNode",
    "buffer_reuse_key",
    "can_match_buffer_size",
    "compute_size_for_scheduler_buffer",
    "decide_layout_opt",
    "estimate_peak_memory",
    "get_freeable_input_buf",
    "inductor_config",
    "inductor_ir",
    "inductor_lowering",
    "inductor_noop_inputs",
    "inductor_size_hint",
    "is_pointwise_use",
    "store_op",
]


def decide_layout_opt(gm: fx.GraphModule) -> bool:
    """Whether Inductor will convert convolutions to channels-last in this training graph."""
    return GraphLowering.decide_layout_opt(gm, is_inference=False)


@torch.library.custom_op("recompute_pass::store", mutates_args=())
def _store(value: torch.Tensor) -> torch.Tensor:
    """A copy of ``value``; under Inductor, ``value`` stored once in a buffer of its own
    kernel, which no other kernel fuses with (``_lower_store``)."""
    return value.clone()


@_store.register_fake
def _store_fake(value: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(value)


@inductor_lowerings.register_lowering(torch.ops.recompute_pass.store.default, type_promotion_kind=None)
def _lower_store(value: Any) -> Any:
    """Inductor computes a pointwise value inside each kernel that reads it, and its
    scheduler fuses a stored value's kernel into its readers' (moving it to the last of
    them); both keep the value's inputs alive until its last reader. Here it is computed
    where the graph puts it, and its inputs may die there."""
    if not inductor_ir.is_storage_and_layout(value):
        value = inductor_ir.ExternKernel.copy_input(value)
    V.graph.no_fuse_buffer_names.add(value.get_name())
    return value


store_op = torch.ops.recompute_pass.store.default


# Inductor's C++ backend runs consecutive kernels as one group until this many arguments.
CPP_MAX_KERNEL_GROUP_ARGS = CppScheduling.MAX_FUSED_KERNEL_ARGS_NUM


# Inductor config read by its scheduler alone (torch 2.13: ``Scheduler`` and the fusion
# choices it asks for), never while lowering: plans that differ only here share one lowering.
SCHEDULER_CONFIG = frozenset({"reorder_for_peak_memory", "score_fusion_memory_threshold"})


@contextlib.contextmanager
def inductor_lowering(
    gm: fx.GraphModule, *, is_backward: bool, donated: Sequence[int], patches: dict[str, object] | None = None
) -> Iterator[tuple[GraphLowering, Callable[[dict[str, object]], Scheduler]]]:
    """``gm`` lowered as Inductor's compile would (``fx_codegen_and_compile`` in torch
    2.13), stopping before code generation: fake-tensor propagation from the placeholders'
    values, post-grad passes and lowering; with a function that schedules the lowering
    (fusion, order) under more config, of ``SCHEDULER_CONFIG`` keys only, as often as asked.

    ``gm`` is modified: pass a copy. ``donated``: backward input positions whose storage
    the graph may reuse (AOTAutograd's ``bw_donated_idxs``). ``patches``: Inductor config
    the real compile will run under (``COMPILE_PATCHES``). Autotuning is off: its choice
    changes no buffer the wrapper allocates, and it would run kernels here.
    """
    inputs = [n.meta.get("val") for n in gm.graph.find_nodes(op="placeholder")]
    fake_mode = detect_fake_mode(inputs)
    if fake_mode is None:
        raise ValueError("the graph's placeholders carry no fake tensors")
    # A forward's real compile gets real inputs and a mode that accepts real tensors
    # (generator states drawn while lowering a replayed draw).
    allowed, fake_mode.allow_non_fake_inputs = fake_mode.allow_non_fake_inputs, True
    try:
        off = {"max_autotune": False, "max_autotune_gemm": False, "benchmark_fusion": False}
        with inductor_config.patch({**(patches or {}), **off}):
            view_to_reshape(gm)
            with torch.no_grad():
                fake_tensor_prop(gm, inputs)
            _recursive_record_original_output_strides(gm)
            with V.set_fake_mode(fake_mode), DebugContext():
                _recursive_post_grad_passes(gm, is_inference=False)
                lowering = GraphLowering(
                    gm,
                    example_inputs=inputs,
                    shape_env=fake_mode.shape_env,
                    is_inference=False,
                    is_backward=is_backward,
                )
                lowering.freeze_runtime_asserts()
                lowering.bw_donated_idxs = list(donated) if is_backward else None
                with V.set_graph_handler(lowering), V.set_extern_kernel_nodes([]):
                    lowering.run(*inputs)
                    lowering.init_wrapper_code()

                    def schedule(scheduling: dict[str, object]) -> Scheduler:
                        if not scheduling.keys() <= SCHEDULER_CONFIG:
                            raise ValueError(f"not scheduler-only config: {sorted(scheduling)}")
                        with inductor_config.patch(scheduling):
                            lowering.scheduler = Scheduler(lowering.operations)
                        return lowering.scheduler

                    yield lowering, schedule
    finally:
        fake_mode.allow_non_fake_inputs = allowed


def inductor_size_hint(expr: object) -> int:
    """An Inductor size expression at its hint, inside ``inductor_schedule``."""
    return int(V.graph.sizevars.optimization_hint(expr, fallback=0))


def inductor_noop_inputs() -> dict[OpOverload, int | Callable[[tuple[Any, ...]], Any]]:
    """Ops Inductor's post-grad pass may replace by one of their inputs (``remove_noop_ops``,
    when a condition on the arguments holds), each with which input: its position in the
    arguments, or a function of them (``cat`` of one tensor)."""
    return {target: kept for target, (_, kept) in noop_registry.items()}
