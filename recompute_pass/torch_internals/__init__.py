"""Every private PyTorch name the ``recompute_pass`` package uses, behind one import:
``from recompute_pass import torch_internals as ti``, then ``ti.<name>``
(``cost_model/torch_internals.py`` is the cost model's).

Floor 0 (below every other): imports torch alone, nothing else of the package.

Torch internals move between releases; a torch upgrade should touch this package only.
Checked against torch 2.13. ``tests/test_torch_internals.py`` fails loudly if a name
disappears. A new name goes in the module of its area, and is exported here:

- ``aot``: AOTAutograd: the joint graph's bookkeeping, PyTorch's partitioners, the eager route;
- ``caches``: Inductor's and AOTAutograd's caches;
- ``compiling``: Inductor's compile of a partitioned graph, ``torch.compile``'s options, Dynamo's config;
- ``distributed``: the default process group;
- ``inductor``: Inductor's lowering, scheduler and memory plan; the ``store`` op's lowering;
- ``lazy_modules``: lazy GraphModules;
- ``offload_ops``: the activation-offload ops;
- ``ops``: operator schemas;
- ``rng``: replaying random draws;
- ``runtime``: the running step: backward passes watched, a CPU memory profile, Dynamo's
  contexts kept for a later compile;
- ``shapes``: symbolic shapes and fake tensors;
- ``tracing``: the structured trace.
"""

from __future__ import annotations

from recompute_pass.torch_internals.aot import (
    PlainAOTInput,
    SubclassGetAttrAOTInput,
    aot_autograd,
    classify_nodes,
    cleanup_recompute_tags,
    default_partition,
    eager_aot_backend,
    extract_fwd_bwd_modules,
    extract_fwd_bwd_outputs,
    flat_static_input_indices,
    force_save_bw_mutation_src,
    force_save_collectives,
    force_save_effectful_ops,
    functorch_config,
    fx_graph_cse,
    inputs_written_back,
    is_bwd_seed_offset,
    is_fwd_seed_offset,
    is_primal,
    is_subgraph_body_call,
    is_tangent,
    min_cut_rematerialization_partition,
    must_be_in_backward,
    must_be_in_forward,
    raise_getitems,
    region_memory_budget,
    reordering_to_mimic_autograd_engine,
    select_decomp_table,
    thread_graphsafe_rng_from_hops,
)
from recompute_pass.torch_internals.caches import (
    caches_disabled,
    inductor_cache_dir,
    observe_autograd_cache,
)
from recompute_pass.torch_internals.compiling import (
    COMPILE_PATCHES,
    ON_SCHEDULED,
    CustomPartitionerFn,
    InductorEntry,
    compile_fx,
    compile_graph_inner,
    dynamo_config,
    honour_compile_patches,
    inductor_compile_fx,
    inductor_mode_patches,
)
from recompute_pass.torch_internals.distributed import (
    collectives_issued,
    default_store,
)
from recompute_pass.torch_internals.inductor import (
    CPP_MAX_KERNEL_GROUP_ARGS,
    SCHEDULER_CONFIG,
    GraphLowering,
    NopKernelSchedulerNode,
    Scheduler,
    SchedulerNode,
    buffer_reuse_key,
    can_match_buffer_size,
    compute_size_for_scheduler_buffer,
    decide_layout_opt,
    estimate_peak_memory,
    get_freeable_input_buf,
    inductor_config,
    inductor_ir,
    inductor_lowering,
    inductor_noop_inputs,
    inductor_size_hint,
    is_pointwise_use,
    store_op,
)
from recompute_pass.torch_internals.lazy_modules import (
    lazy_codegen,
    lazy_graph_module,
)
from recompute_pass.torch_internals.offload_ops import (
    ao_offload,
    ao_reload,
    ao_wait_tensor,
    insert_offload_ops,
    pinned_memory_pool,
)
from recompute_pass.torch_internals.ops import (
    HigherOrderOperator,
    OpOverload,
    is_functional_op,
    returns_an_alias,
    written_arguments,
)
from recompute_pass.torch_internals.rng import (
    functionalize_rng_ops,
    inductor_lookup_seed,
    replayable_rng_state_bytes,
    run_and_save_rng_state,
    run_with_rng_state,
)
from recompute_pass.torch_internals.runtime import (
    BackwardWatch,
    CompileContexts,
    MemoryProfile,
    after_backward,
    backward_compiled_with_forward,
    fake_inputs,
    frames_compiled,
    profiler_enabled,
    queue_engine_callback,
)
from recompute_pass.torch_internals.shapes import (
    FakeTensor,
    ShapeEnv,
    detect_fake_mode,
    input_dim_of,
    is_fake_tensor,
    is_sym_node,
    shape_env_hints,
    symbol_sources,
    symint_of,
)
from recompute_pass.torch_internals.tracing import (
    trace_artifact,
)

__all__ = [
    "COMPILE_PATCHES",
    "InductorEntry",
    "CPP_MAX_KERNEL_GROUP_ARGS",
    "BackwardWatch",
    "CompileContexts",
    "CustomPartitionerFn",
    "FakeTensor",
    "GraphLowering",
    "HigherOrderOperator",
    "MemoryProfile",
    "NopKernelSchedulerNode",
    "ON_SCHEDULED",
    "OpOverload",
    "PlainAOTInput",
    "SCHEDULER_CONFIG",
    "Scheduler",
    "SchedulerNode",
    "ShapeEnv",
    "SubclassGetAttrAOTInput",
    "after_backward",
    "ao_offload",
    "ao_reload",
    "ao_wait_tensor",
    "aot_autograd",
    "backward_compiled_with_forward",
    "buffer_reuse_key",
    "caches_disabled",
    "can_match_buffer_size",
    "classify_nodes",
    "cleanup_recompute_tags",
    "collectives_issued",
    "compile_fx",
    "compile_graph_inner",
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
    "fake_inputs",
    "frames_compiled",
    "flat_static_input_indices",
    "force_save_bw_mutation_src",
    "force_save_collectives",
    "force_save_effectful_ops",
    "functionalize_rng_ops",
    "functorch_config",
    "fx_graph_cse",
    "get_freeable_input_buf",
    "honour_compile_patches",
    "inductor_cache_dir",
    "inductor_compile_fx",
    "inductor_config",
    "inductor_ir",
    "inductor_lookup_seed",
    "inductor_lowering",
    "inductor_mode_patches",
    "inductor_noop_inputs",
    "inductor_size_hint",
    "input_dim_of",
    "inputs_written_back",
    "insert_offload_ops",
    "is_bwd_seed_offset",
    "is_fake_tensor",
    "is_functional_op",
    "is_fwd_seed_offset",
    "is_pointwise_use",
    "is_primal",
    "is_subgraph_body_call",
    "is_sym_node",
    "is_tangent",
    "lazy_codegen",
    "lazy_graph_module",
    "min_cut_rematerialization_partition",
    "must_be_in_backward",
    "must_be_in_forward",
    "observe_autograd_cache",
    "pinned_memory_pool",
    "profiler_enabled",
    "queue_engine_callback",
    "raise_getitems",
    "region_memory_budget",
    "reordering_to_mimic_autograd_engine",
    "replayable_rng_state_bytes",
    "returns_an_alias",
    "run_and_save_rng_state",
    "run_with_rng_state",
    "select_decomp_table",
    "shape_env_hints",
    "store_op",
    "symbol_sources",
    "symint_of",
    "thread_graphsafe_rng_from_hops",
    "trace_artifact",
    "written_arguments",
]
