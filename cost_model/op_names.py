"""Op-name tables behind :func:`cost_model.kinds.classify` (names without namespace/overload).

Tags (``torch.Tag.pointwise``/``reduction``/``nondeterministic_seeded``) and ``op.is_view``
classify most ops; these lists cover what the tags miss.
"""

from __future__ import annotations


def _names(text: str) -> frozenset[str]:
    """Op names (without namespace/overload) from a whitespace-separated list."""
    return frozenset(text.split())


GEMM_OPS = _names("mm addmm bmm baddbmm _scaled_mm _int_mm _addmm_activation addbmm mv addmv dot vdot")
CONV_OPS = _names(
    """
    convolution _convolution cudnn_convolution convolution_overrideable _slow_conv2d_forward
    convolution_backward mkldnn_convolution
    """
)
ATTENTION_FWD_OPS = _names(
    """
    _scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_for_cpu
    _scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention
    _scaled_dot_product_fused_attention_overrideable _flash_attention_forward
    _efficient_attention_forward _cudnn_attention_forward scaled_dot_product_attention
    _scaled_dot_product_attention_math flex_attention
    """
)
ATTENTION_BWD_OPS = _names(
    """
    _scaled_dot_product_flash_attention_backward
    _scaled_dot_product_flash_attention_for_cpu_backward
    _scaled_dot_product_efficient_attention_backward _scaled_dot_product_cudnn_attention_backward
    _scaled_dot_product_fused_attention_overrideable_backward _flash_attention_backward
    _efficient_attention_backward _cudnn_attention_backward flex_attention_backward
    """
)
ATTENTION_OPS = ATTENTION_FWD_OPS | ATTENTION_BWD_OPS
# Low-level kernels whose dense inputs are (batch, seq, heads, dim); the rest take (b, h, s, d).
BSHD_ATTENTION_OPS = _names(
    "_flash_attention_forward _flash_attention_backward _efficient_attention_forward "
    "_efficient_attention_backward"
)
# Reductions and normalisations (and their backward), beyond ``torch.Tag.reduction``.
REDUCTION_OPS = _names(
    """
    _softmax _log_softmax _softmax_backward_data _log_softmax_backward_data native_layer_norm
    native_layer_norm_backward native_batch_norm native_batch_norm_backward _native_batch_norm_legit
    _native_batch_norm_legit_no_training _native_batch_norm_legit_functional _batch_norm_with_update
    _batch_norm_with_update_functional _batch_norm_no_update batch_norm_backward native_group_norm
    native_group_norm_backward _fused_rms_norm _fused_rms_norm_backward cumsum cumprod logcumsumexp
    nll_loss_forward nll_loss_backward nll_loss2d_forward nll_loss2d_backward topk sort
    max_pool2d_with_indices max_pool2d_with_indices_backward max_pool3d_with_indices
    max_pool3d_with_indices_backward avg_pool2d avg_pool2d_backward avg_pool3d avg_pool3d_backward
    _adaptive_avg_pool2d _adaptive_avg_pool2d_backward _adaptive_avg_pool3d
    _adaptive_avg_pool3d_backward adaptive_max_pool2d adaptive_max_pool2d_backward mse_loss
    mse_loss_backward _cdist_forward _cdist_backward _euclidean_dist
    """
)
DATA_MOVEMENT_OPS = _names(
    """
    cat stack index _unsafe_index index_select gather scatter scatter_add scatter_reduce index_put
    _unsafe_index_put _unsafe_masked_index _unsafe_masked_index_put_accumulate
    index_add index_copy index_fill masked_scatter masked_select embedding
    embedding_dense_backward copy copy_ constant_pad_nd reflection_pad2d replication_pad2d
    slice_scatter select_scatter diagonal_scatter as_strided_scatter repeat flip roll tril triu full
    full_like zeros zeros_like ones ones_like new_full new_zeros new_ones scalar_tensor arange iota
    linspace nonzero _local_scalar_dense lift_fresh_copy upsample_nearest2d
    upsample_nearest2d_backward upsample_bilinear2d upsample_bilinear2d_backward col2im im2col
    inductor_lookup_seed _pdist_forward resize_ set_ fill_ empty empty_like empty_strided
    empty_permuted new_empty new_empty_strided unfold_backward
    """
)
# Factories of their arguments alone: Inductor lowers them to index expressions, computed
# inside each kernel that reads them, never a kernel or a buffer of their own.
CONSTRUCTOR_OPS = _names("full zeros ones scalar_tensor arange iota")
# Ops that allocate without writing: no kernel runs.
ALLOC_ONLY_OPS = _names("empty empty_like empty_strided empty_permuted new_empty new_empty_strided")
# Factories that take a tensor only as a template (shape/dtype/device): they read no data.
TEMPLATE_OPS = _names(
    """
    empty_like zeros_like ones_like full_like rand_like randn_like randint_like new_empty
    new_empty_strided new_zeros new_ones new_full
    """
)
# Source is read only where indexed: bytes read = indices + elements gathered.
GATHER_OPS = _names("index _unsafe_index index_select gather embedding")
VIEW_OPS = _names("_unsafe_view lift_fresh _reshape_alias")
POINTWISE_OPS = _names("_to_copy to fill clamp_min clamp_max")
INDUCTOR_RANDOM_OPS = _names("inductor_seeds inductor_random inductor_randint")
RANDOM_HOPS = _names("run_and_save_rng_state run_with_rng_state graphsafe_run_with_rng_state")
# No kernel: SymInt queries and runtime asserts.
SYM_OPS = _names(
    """
    sym_size sym_stride sym_numel sym_storage_offset sym_constrain_range
    sym_constrain_range_for_size _assert_async _assert_scalar _functional_assert_async
    _functional_assert_scalar _print
    """
)
COLLECTIVE_NAMESPACES = _names("_c10d_functional c10d_functional _c10d_functional_autograd _dtensor")
# Fresh randomness only: these use up generator state (or make new seeds). Inductor's
# ``inductor_random``/``inductor_randint`` and ``run_with_rng_state`` are deterministic
# functions of a seed/state tensor (recomputing them with the same seed is exact).
FRESH_RANDOM_OPS = _names("inductor_seeds run_and_save_rng_state")
