"""Work an attention kernel really does: causal masking and flex block sparsity.

``NodeCost.flops`` for attention is FlopCounterMode's count, which ignores masking (so
MFU-style numbers stay comparable with PyTorch's). ``NodeCost.effective_flops`` is what the
kernel executes, used by the runtime estimate:

- causal (``is_causal=True``, or ``custom_mask_type`` 1/2 for the efficient kernels): the
  flash/efficient/cuDNN kernels skip fully masked tiles, so the work scales with the
  unmasked fraction of the L x S score matrix. We use the element-level fraction
  ``kept / (L * S)``: top-left alignment (PyTorch's ``is_causal``, ``custom_mask_type=1``)
  keeps ``m(m+1)/2 + (L-m)S`` with ``m = min(L, S)``; bottom-right (``custom_mask_type=2``)
  keeps ``m(m+1)/2 + m(S-m)``. For L == S both are ``L(L+1)/2``, i.e. a bit over half.
  Diagonal tiles are computed in full, so the true fraction is slightly higher for large
  tiles; the difference is O(tile/L). Jagged (nested) calls are not discounted.
- flex attention: ``node.meta["custom"]["sparsity_hint"]`` in [0, 1] (the annotation
  ``torch.utils._runtime_estimation`` passes to the registry formula) scales the work by
  ``1 - sparsity``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sympy

from .op_names import ATTENTION_OPS, BSHD_ATTENTION_OPS
from .symbolic import ONE, is_tensor, shape_of

_NESTED_OFFSETS = ("cum_seq_q", "cu_seqlens_q")


def causal_kept(q_len: sympy.Expr, k_len: sympy.Expr, *, bottom_right: bool = False) -> sympy.Expr:
    """Entries of the L x S score matrix a causal mask keeps."""
    m = sympy.Min(q_len, k_len)
    tail = m * (k_len - m) if bottom_right else (q_len - m) * k_len
    return m * (m + 1) / 2 + tail


def _causal_alignment(name: str, bound: Mapping[str, Any]) -> str | None:
    """ "top_left", "bottom_right" or None (not causal, or unknown)."""
    if "custom_mask_type" in bound:
        mask_type = bound["custom_mask_type"]
        return {1: "top_left", 2: "bottom_right"}.get(mask_type) if isinstance(mask_type, int) else None
    return "top_left" if bound.get("is_causal") is True else None


def work_fraction(name: str, bound: Mapping[str, Any], node_meta: Mapping[str, Any]) -> sympy.Expr:
    """Fraction of the counted FLOPs an attention kernel executes (1 when nothing is skipped)."""
    if name not in ATTENTION_OPS:
        return ONE
    if name.startswith("flex_attention"):
        custom = node_meta.get("custom") or {}
        sparsity = custom.get("sparsity_hint", 0.0) if isinstance(custom, Mapping) else 0.0
        if isinstance(sparsity, (int, float)) and 0 < sparsity <= 1:
            return sympy.Rational(1) - sympy.nsimplify(sparsity)
        return ONE
    alignment = _causal_alignment(name, bound)
    if alignment is None or any(is_tensor(bound.get(n)) for n in _NESTED_OFFSETS):
        return ONE
    query, key = bound.get("query"), bound.get("key")
    if not (is_tensor(query) and is_tensor(key)):
        return ONE
    dim = 1 if name in BSHD_ATTENTION_OPS else -2  # the sequence dimension
    q_len, k_len = shape_of(query)[dim], shape_of(key)[dim]  # type: ignore[arg-type]
    kept = causal_kept(q_len, k_len, bottom_right=alignment == "bottom_right")
    return kept / (q_len * k_len)
