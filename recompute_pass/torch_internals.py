"""Every private PyTorch name the ``recompute_pass`` package uses, in one place
(``cost_model/torch_internals.py`` is the cost model's).

Torch internals move between releases; a torch upgrade should touch this file only.
Checked against torch 2.13. ``tests/test_torch_internals.py`` fails loudly if a name
disappears.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import unittest.mock
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import sympy
import torch
from torch import fx
from torch._dynamo import config as dynamo_config  # benchmarks: recompile limit for many plans
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.debugging import get_nop_func
from torch._dynamo.source import LocalSource, TensorProperty, TensorPropertySource
from torch._functorch import config as functorch_config

# Importing it registers the ``ao`` offload ops (``ao.offload``, ``ao.reload``, ``ao.wait_tensor``).
from torch._functorch._activation_offloading.activation_offloading import (
    offload_chosen_sets_async as _offload_chosen_sets_async,
)
from torch._functorch._activation_offloading.offload_ops import pinned_memory_pool
from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
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
from torch._functorch.partitioners import functionalize_rng_ops as _functionalize_rng_ops
from torch._guards import detect_fake_mode
from torch._inductor import compile_fx as inductor_compile_fx
from torch._inductor import config as inductor_config
from torch._inductor import ir as inductor_ir
from torch._inductor import lowering as inductor_lowerings
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.wrapper import buffer_reuse_key, can_match_buffer_size
from torch._inductor.compile_fx import (
    _recursive_post_grad_passes,
    _recursive_record_original_output_strides,
    compile_fx,
    fake_tensor_prop,
    select_decomp_table,
)
from torch._inductor.custom_graph_pass import CustomPartitionerFn
from torch._inductor.debug import DebugContext
from torch._inductor.fx_passes.post_grad import noop_registry, view_to_reshape
from torch._inductor.graph import GraphLowering
from torch._inductor.memory import (
    compute_size_for_scheduler_buffer,
    estimate_peak_memory,
    get_freeable_input_buf,
)
from torch._inductor.runtime.cache_dir_utils import cache_dir as _inductor_cache_dir
from torch._inductor.scheduler import NopKernelSchedulerNode, Scheduler, SchedulerNode
from torch._inductor.utils import is_pointwise_use
from torch._inductor.virtualized import V
from torch._ops import HigherOrderOperator, OpOverload
from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx._lazy_graph_module import _LazyGraphModule, _use_lazy_graph_module
from torch.fx.experimental.proxy_tensor import is_sym_node
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.fx.traceback import _get_memory_budget_annotation

log = logging.getLogger(__name__)

__all__ = [
    "ao_offload",
    "ao_reload",
    "ao_wait_tensor",
    "store_op",
    "insert_offload_ops",
    "pinned_memory_pool",
    "CPP_MAX_KERNEL_GROUP_ARGS",
    "CustomPartitionerFn",
    "HigherOrderOperator",
    "NopKernelSchedulerNode",
    "PlainAOTInput",
    "SchedulerNode",
    "SubclassGetAttrAOTInput",
    "aot_autograd",
    "buffer_reuse_key",
    "can_match_buffer_size",
    "classify_nodes",
    "cleanup_recompute_tags",
    "collectives_issued",
    "compile_fx",
    "compile_graph_inner",
    "honour_compile_patches",
    "caches_disabled",
    "inductor_cache_dir",
    "observe_autograd_cache",
    "trace_artifact",
    "COMPILE_PATCHES",
    "ON_SCHEDULED",
    "SCHEDULER_CONFIG",
    "compute_size_for_scheduler_buffer",
    "decide_layout_opt",
    "default_partition",
    "default_store",
    "detect_fake_mode",
    "dynamo_config",
    "eager_aot_backend",
    "estimate_peak_memory",
    "extract_fwd_bwd_modules",
    "extract_fwd_bwd_outputs",
    "flat_static_input_indices",
    "force_save_bw_mutation_src",
    "force_save_collectives",
    "force_save_effectful_ops",
    "functionalize_rng_ops",
    "functorch_config",
    "fx_graph_cse",
    "get_freeable_input_buf",
    "inductor_config",
    "inductor_ir",
    "inductor_lowering",
    "inductor_size_hint",
    "input_dim_of",
    "shape_env_hints",
    "symbol_sources",
    "symint_of",
    "is_bwd_seed_offset",
    "is_fake_tensor",
    "is_functional_op",
    "inductor_mode_patches",
    "inputs_written_back",
    "returns_an_alias",
    "written_arguments",
    "is_subgraph_body_call",
    "is_fwd_seed_offset",
    "is_pointwise_use",
    "is_primal",
    "is_sym_node",
    "is_tangent",
    "lazy_codegen",
    "lazy_graph_module",
    "min_cut_rematerialization_partition",
    "must_be_in_backward",
    "must_be_in_forward",
    "raise_getitems",
    "region_memory_budget",
    "replayable_rng_state_bytes",
    "reordering_to_mimic_autograd_engine",
    "run_and_save_rng_state",
    "run_with_rng_state",
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
region_memory_budget = _get_memory_budget_annotation
# PyTorch 2.13's activation-offload ops (one transfer stream, a pinned host pool): the
# forward emits ``ao.offload`` + ``ao.wait_tensor``, the backward ``ao.reload`` + ``ao.wait_tensor``.
ao_offload = torch.ops.ao.offload.default
ao_reload = torch.ops.ao.reload.default
ao_wait_tensor = torch.ops.ao.wait_tensor.default
# Inductor's replacement of random ops numbers each draw's seed (``replace_random``).
inductor_lookup_seed = torch.ops.prims.inductor_lookup_seed.default


def insert_offload_ops(forward: fx.GraphModule, backward: fx.GraphModule, names: Sequence[str]) -> None:
    """PyTorch's pass: each forward output named in ``names`` (a saved tensor) is offloaded
    after its last forward use, and reloaded before its first backward use (both graphs
    edited in place). It reads the ``saved_for_offloading`` mark on the forward's nodes."""
    chosen = set(names)
    (output,) = forward.graph.find_nodes(op="output")
    for node in output.args[0]:
        if isinstance(node, fx.Node) and node.name in chosen:
            node.meta["saved_for_offloading"] = True
    _offload_chosen_sets_async(forward, backward)


"""The budget ``torch.autograd.graph.region_activation_memory_budget`` put on a node, or None."""

# Devices whose generator ``run_and_save_rng_state``/``run_with_rng_state`` save and restore.
_REPLAY_DEVICES = ("cpu", "cuda")


def functionalize_rng_ops(
    joint: fx.GraphModule, forward: fx.GraphModule, backward: fx.GraphModule, num_saved_sym: int
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Torch's rewrite of draws tagged for recomputation into state-saving/replaying ones.

    It builds the state's fake value under the ambient fake mode, which a partition run
    outside AOTAutograd (snapshots, benchmarks) lacks: use the joint graph's own then.
    """
    draws = [(n.name, n.meta.get("val")) for n in backward.graph.nodes if _is_seeded(n)]
    with contextlib.ExitStack() as stack:
        if detect_fake_mode() is None:
            vals = [n.meta.get("val") for n in joint.graph.find_nodes(op="placeholder")]
            fake_mode = detect_fake_mode(vals)
            if fake_mode is not None:
                stack.enter_context(fake_mode)
        forward, backward = _functionalize_rng_ops(joint, forward, backward, num_saved_sym)
    # Torch leaves the new nodes without ``meta["val"]``, which memory accounting reads:
    # a forward wrapper yields (state, the draw's value), a backward one the draw's value
    # (each replaces a draw in place, so in graph order they match the draws replaced).
    for node in forward.graph.nodes:
        if node.target is run_and_save_rng_state and "val" not in node.meta:
            results = {user.args[1]: user.meta.get("val") for user in node.users}
            node.meta["val"] = (results.get(0), results.get(1))
    remaining = {n.name for n in backward.graph.nodes if _is_seeded(n)}
    replaced = [val for name, val in draws if name not in remaining]
    replays = [n for n in backward.graph.nodes if n.target is run_with_rng_state and "val" not in n.meta]
    for node, val in zip(replays, replaced, strict=True):
        node.meta["val"] = val
    return forward, backward


def _is_seeded(node: fx.Node) -> bool:
    tags = getattr(node.target, "tags", ())
    return node.op == "call_function" and torch.Tag.nondeterministic_seeded in tags


def is_subgraph_body_call(joint_inputs: Sequence[object]) -> bool:
    """Whether AOTAutograd is partitioning a higher-order op's body (``invoke_subgraph``).

    It calls the partitioner with no joint inputs there, and with no static-input indices
    (a TODO in ``_aot_autograd/graph_compile.py``); a whole graph always has inputs.
    """
    return len(joint_inputs) == 0


def is_functional_op(target: object) -> bool:
    """Whether an operator's schema proves it pure: no mutated argument, no aliased result.

    A custom op declares its mutations (``torch.library.custom_op(mutates_args=...)``), so
    one whose schema shows none computes a fresh value from its inputs and may be recomputed.
    """
    if not isinstance(target, OpOverload):
        return False
    schema = target._schema
    return not schema.is_mutable and all(r.alias_info is None for r in schema.returns)


def inductor_mode_patches(mode: str | None, options: dict[str, Any] | None) -> dict[str, Any]:
    """Inductor's config for ``torch.compile(mode=..., options=...)``, validated as torch
    validates it for ``backend="inductor"`` (a ``RuntimeError`` naming an unknown option)."""
    return dict(torch._TorchCompileInductorWrapper(mode, options, dynamic=None).config)


def returns_an_alias(target: object) -> bool:
    """Whether an operator returns a view of an input (``view_as_complex``) or the input
    itself (an in-place op), by its schema."""
    if not isinstance(target, OpOverload):
        return False
    return target.is_view or any(r.alias_info is not None for r in target._schema.returns)


def written_arguments(node: fx.Node) -> list[fx.Node]:
    """The graph values an op writes in place (its schema's ``a!`` arguments): a kept input
    mutation's ``copy_`` into a buffer, say."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, OpOverload):
        return []
    written = []
    for index, argument in enumerate(target._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = node.args[index] if index < len(node.args) else node.kwargs.get(argument.name)
        if isinstance(value, fx.Node):
            written.append(value)
    return written


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


def replayable_rng_state_bytes(node: fx.Node) -> int | None:
    """Bytes of generator state to save so that backward can replay ``node``'s draw, or None.

    Replay goes through ``run_and_save_rng_state`` (forward) and ``run_with_rng_state``
    (backward), which save and restore the device's default generator (``functionalize_rng_ops``).
    That excludes higher-order ops, ops given an explicit ``torch.Generator``, devices without
    such a generator, and Inductor's own seed prims (their seeds are the saved state already).
    On CUDA without ``fallback_random``, torch replays through the graph-safe generator, which
    saves nothing.
    """
    target = node.target
    if not isinstance(target, OpOverload) or target.namespace == "prims":
        return None
    values = fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    leaves = torch.utils._pytree.tree_leaves((values, node.meta.get("val")))
    if any(isinstance(leaf, torch.Generator) for leaf in leaves):
        return None
    devices = {leaf.device for leaf in leaves if isinstance(leaf, torch.Tensor)}
    devices |= {torch.device(d) for d in (node.kwargs.get("device"),) if d is not None}
    if len(devices) != 1:
        return None
    (device,) = devices
    if device.type not in _REPLAY_DEVICES:
        return None
    if device.type == "cpu":
        return torch.get_rng_state().numel()
    if functorch_config.graphsafe_rng_functionalization and not inductor_config.fallback_random:
        return 0
    return 16  # torch.cuda.get_rng_state(): a Philox seed and offset (two int64)


def decide_layout_opt(gm: fx.GraphModule) -> bool:
    """Whether Inductor will convert convolutions to channels-last in this training graph."""
    return GraphLowering.decide_layout_opt(gm, is_inference=False)


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


def collectives_issued() -> int:
    """How many collectives the default group's CPU backend has issued in this process."""
    from torch.distributed.distributed_c10d import _get_default_group

    backend = _get_default_group()._get_backend(torch.device("cpu"))
    return backend._get_sequence_number_for_group()


def default_store() -> torch.distributed.Store:
    """The default process group's key-value store (its rendezvous)."""
    from torch.distributed.distributed_c10d import _get_default_store

    return _get_default_store()


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


# ``gm.meta`` key: Inductor config a partitioned graph is to be compiled under, set by the
# partitioner when its memory model found the graph peaks lower so (``inductor_memory``).
COMPILE_PATCHES = "recompute_pass.inductor_patches"


# Inductor's compile of one graph, behind ``compile_fx_inner`` (forward and backward alike,
# whatever route called ``compile_fx``, the backward possibly at its first call). Looked up
# by name at each call, as torch's own ``torch._dynamo.testing`` patches it.
compile_graph_inner = inductor_compile_fx._compile_fx_inner


# ``gm.meta`` key: a function the real compile calls with its ``GraphLowering`` and
# ``Scheduler`` once it has scheduled the graph, before code generation (the partitioner
# reads the compile's own memory plan there, ``memory.audit``).
ON_SCHEDULED = "recompute_pass.on_scheduled"


def _compile_graph_under_its_patches(
    gm: fx.GraphModule, example_inputs: Sequence[object], *args: Any, **kwargs: Any
) -> Any:
    observed = _scheduled_observed(gm.meta.get(ON_SCHEDULED))
    with inductor_config.patch(dict(gm.meta.get(COMPILE_PATCHES, {}))), observed:
        return compile_graph_inner(gm, example_inputs, *args, **kwargs)


@contextlib.contextmanager
def _scheduled_observed(observer: Callable[[GraphLowering, Scheduler], None] | None) -> Iterator[None]:
    """While the block runs, ``observer`` sees each graph Inductor schedules for code
    generation (``GraphLowering._update_scheduler`` in torch 2.13). An observer's error is
    logged, never raised: it must not fail the compile."""
    if observer is None:
        yield
        return
    update = GraphLowering._update_scheduler

    def observed(lowering: GraphLowering) -> None:
        update(lowering)
        try:
            observer(lowering, lowering.scheduler)
        except Exception:
            log.warning("recompute_pass: reading the compiled graph's memory plan failed", exc_info=True)

    with unittest.mock.patch.object(GraphLowering, "_update_scheduler", observed):
        yield


def honour_compile_patches() -> None:
    """From now on, every graph Inductor compiles does so under the config its
    ``COMPILE_PATCHES`` asks for, and is shown to its ``ON_SCHEDULED`` observer (no-ops
    for graphs without them), on every route that reaches Inductor's ``compile_fx_inner``:
    our backends, ``custom_partitioner_fn`` set by hand, trainers calling
    ``torch.compile(model)``. Idempotent."""
    if inductor_compile_fx._compile_fx_inner is not _compile_graph_under_its_patches:
        inductor_compile_fx._compile_fx_inner = _compile_graph_under_its_patches


def inductor_cache_dir() -> str:
    """Inductor's cache folder (``$TORCHINDUCTOR_CACHE_DIR``, else a per-user temp folder):
    where its FX-graph and AOTAutograd caches live, and so where what keys them belongs."""
    return _inductor_cache_dir()


def caches_disabled() -> bool:
    """``force_disable_caches`` (Inductor's or ``torch.compiler``'s): no cache read or written."""
    return bool(torch.compiler.config.force_disable_caches or inductor_config.force_disable_caches)


# AOTAutograd's cache skips the partitioner on a hit. Its lookup is watched (below) so that a
# hit can say which key it returned, and a miss which key the compile that follows saves under.
_autograd_cache_try_load = AOTAutogradCache.try_load
_autograd_cache_lookup = AOTAutogradCache._lookup
_looked_up = threading.local()  # .key: the key of this thread's latest lookup
_observers: list[Callable[[str | None, bool, Sequence[object]], None]] = []


def _lookup_observed(key: str, *args: Any, **kwargs: Any) -> Any:
    _looked_up.key = key
    return _autograd_cache_lookup(key, *args, **kwargs)


def _try_load_observed(mod: Any, args: list[Any], aot_config: Any, *rest: Any, **kwargs: Any) -> Any:
    _looked_up.key = None
    compiled_fn, aot_config = _autograd_cache_try_load(mod, args, aot_config, *rest, **kwargs)
    hit = compiled_fn is not None
    info = getattr(aot_config, "cache_info", None)
    key = _looked_up.key if hit else getattr(info, "cache_key", None)  # None: bypassed, nothing saved
    for observer in list(_observers):
        observer(key, hit, args)
    return compiled_fn, aot_config


def observe_autograd_cache(observer: Callable[[str | None, bool, Sequence[object]], None]) -> None:
    """Call ``observer(key, hit, fake_args)`` after each AOTAutograd cache lookup: on a hit
    with the key whose entry is returned (no partitioner runs), on a miss with the key the
    compile that follows is saved under (None when the cache is bypassed), whatever route
    reached AOTAutograd. Idempotent per observer."""
    if observer not in _observers:
        _observers.append(observer)
    if AOTAutogradCache.try_load is not _try_load_observed:
        AOTAutogradCache.try_load = staticmethod(_try_load_observed)  # type: ignore[method-assign]
        AOTAutogradCache._lookup = staticmethod(_lookup_observed)  # type: ignore[method-assign]


def trace_artifact(name: str, payload: Callable[[], str]) -> None:
    """A JSON artifact in PyTorch's structured trace (``TORCH_TRACE``; tlparse lists it
    under the graph being compiled). Costs nothing when no trace is being written."""
    torch._logging.trace_structured(
        "artifact", metadata_fn=lambda: {"name": name, "encoding": "json"}, payload_fn=payload
    )


def symint_of(shape_env: ShapeEnv, expr: sympy.Expr) -> int | torch.SymInt:
    """``expr`` over ``shape_env``'s symbols as a size a fake tensor can take."""
    if expr.is_number:
        return int(expr)
    return shape_env.create_symintnode(expr, hint=None)


def inductor_size_hint(expr: object) -> int:
    """An Inductor size expression at its hint, inside ``inductor_schedule``."""
    return int(V.graph.sizevars.optimization_hint(expr, fallback=0))


def is_fake_tensor(value: object) -> bool:
    return isinstance(value, FakeTensor)


def symbol_sources(shape_env: ShapeEnv) -> dict[object, tuple[str, ...]]:
    """Each symbol's Dynamo source names (``"L['idx'].size()[1]"``): how the user's
    inputs name a symbol (``RecomputeOptions.plan_sizes``)."""
    return {
        sym: tuple(source.name for source in sources) for sym, sources in shape_env.var_to_sources.items()
    }


def input_dim_of(shape_env: ShapeEnv, symbol: object) -> list[tuple[str, str, int]]:
    """The (source name, argument name, dimension) of each input size a symbol stands
    for: the sizes of the compiled function's own arguments (not of parameters)."""
    found = []
    for source in shape_env.var_to_sources.get(symbol, ()):
        if (
            isinstance(source, TensorPropertySource)
            and source.prop is TensorProperty.SIZE
            and isinstance(source.base, LocalSource)
            and source.idx is not None
        ):
            found.append((source.name, source.base.local_name, int(source.idx)))
    return found


def _clear_shape_env_caches() -> None:
    """Drop ShapeEnv's memoised answers: some (``size_hint``, ``evaluate_expr``) are
    computed from the hints and cached by expression alone."""
    for value in vars(ShapeEnv).values():
        while value is not None:
            clear = getattr(value, "cache_clear", None)
            if callable(clear):
                clear()
            value = getattr(value, "__wrapped__", None)


@contextlib.contextmanager
def shape_env_hints(shape_env: ShapeEnv | None, values: dict[Any, int]) -> Iterator[None]:
    """Inside: the shape env's hints (what Inductor's lowering sizes buffers by) are
    ``values`` where they differ, and no guard is recorded, since a guard decided at
    other hints than the traced ones could contradict the inputs being compiled.
    Restored after. Guards are suppressed even when nothing differs: a prediction's
    lowering must leave the shape env as it found it."""
    backed = getattr(shape_env, "backed_var_to_val", None)
    if shape_env is None or backed is None:
        yield
        return
    changed = {sym: val for sym, val in values.items() if sym in backed and backed[sym] != val}
    if not changed:
        with shape_env.suppress_guards():
            yield
        return
    saved = {sym: backed[sym] for sym in changed}
    try:
        for sym, val in changed.items():
            backed[sym] = sympy.Integer(val)
        _clear_shape_env_caches()
        shape_env._version_counter += 1
        with shape_env.suppress_guards():
            yield
    finally:
        backed.update(saved)
        _clear_shape_env_caches()
        shape_env._version_counter += 1


def lazy_codegen() -> contextlib.AbstractContextManager[None]:
    """Every GraphModule built inside (PyTorch's extraction, Inductor's passes) is a lazy one:
    a checked plan's graphs are lowered, never run, so their Python code is never needed
    (codegen was a tenth of a 12-layer GPT-2's partitioner time at budget 0)."""
    return _use_lazy_graph_module(True)


def lazy_graph_module(root: torch.nn.Module, graph: fx.Graph) -> fx.GraphModule:
    """A GraphModule whose Python code is generated when first run or read, not when built:
    the peak search builds several graphs per plan and runs only the chosen plan's (on a
    12-layer Llama, codegen was an eighth of the partitioner's time under cProfile)."""
    return _LazyGraphModule(root, graph)


def inductor_noop_inputs() -> dict[OpOverload, int | Callable[[tuple[Any, ...]], Any]]:
    """Ops Inductor's post-grad pass may replace by one of their inputs (``remove_noop_ops``,
    when a condition on the arguments holds), each with which input: its position in the
    arguments, or a function of them (``cat`` of one tensor)."""
    return {target: kept for target, (_, kept) in noop_registry.items()}
