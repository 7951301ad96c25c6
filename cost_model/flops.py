"""FLOP counts, symbolic in shapes.

Ops in ``torch.utils.flop_counter.flop_registry`` are counted by calling the registry's own
formula, so ``flops`` is identical to ``FlopCounterMode``'s count (one documented
exception: the low-level attention kernels below, where PyTorch's count is wrong). The formulas get shapes as
tuples of sympy expressions (never SymInts), so their arithmetic builds an expression and
adds no guard; a :class:`Shape` is a tuple that also has ``.shape``, so the formulas
registered "raw" (taking tensors, reading ``.shape``) accept it too.

Beyond the registry:
- CPU flash attention fwd/bwd, ``_scaled_dot_product_fused_attention_overrideable``(+bwd),
  ``_cudnn_attention_forward``/``backward`` and ``scaled_dot_product_attention`` use the
  formula of ``_scaled_dot_product_flash_attention``(+bwd): same math, same leading
  arguments. (FlopCounterMode counts CPU flash attention as 0.)
- Low-level ``_flash_attention_*``/``_efficient_attention_*``: the registry reads their
  (batch, seq, heads, dim) inputs as (b, h, s, d); we transpose first (see
  :func:`_low_level_attention_flops`). Jagged calls: batch = ``len(cum_seq_q) - 1`` at the
  max sequence lengths, which is what the registry computes on fake tensors.
- ``mv``/``addmv``/``dot``/``vdot``/``addbmm``/``_int_mm``/``_addmm_activation``/
  ``mkldnn_convolution``: 2 FLOPs per multiply-add, like the registry's GEMMs.
- POINTWISE and RANDOM ops: one FLOP per output element. FlopCounterMode counts them 0
  (it measures matmul work for MFU); we do not, because the partitioner must see that
  recomputing a pointwise chain costs something.
- REDUCTION ops (norms, softmax, pooling, losses and their backward): one FLOP per
  element of the first tensor input.
- VIEW, NONE, DATA_MOVEMENT, COLLECTIVE, UNKNOWN: 0 (DATA_MOVEMENT and UNKNOWN are
  costed by bytes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch

from . import torch_internals as ti
from .hints import SizeHints
from .kinds import OpKind, base_name
from .op_names import BSHD_ATTENTION_OPS
from .symbolic import ZERO, is_tensor, numel, shape_of, tensors_in, to_expr

aten = torch.ops.aten
FlopFormula = Callable[..., Any]


class Shape(tuple):
    """A shape tuple that quacks like a tensor for raw registry formulas (``x.shape``)."""

    @property
    def shape(self) -> Shape:
        return self


def _mm(a: Shape, b: Shape) -> sympy.Expr:
    return ti.mm_flop(a, b)


def _mv_flop(mat: Shape, vec: Shape, *args: object, **kwargs: object) -> sympy.Expr:
    return 2 * mat[0] * mat[1]


def _addmv_flop(bias: Shape, mat: Shape, vec: Shape, *args: object, **kwargs: object) -> sympy.Expr:
    return 2 * mat[0] * mat[1]


def _dot_flop(a: Shape, b: Shape, *args: object, **kwargs: object) -> sympy.Expr:
    return 2 * a[0]


def _addbmm_flop(bias: Shape, a: Shape, b: Shape, *args: object, **kwargs: object) -> sympy.Expr:
    return ti.bmm_flop(a, b)


def _int_mm_flop(a: Shape, b: Shape, *args: object, **kwargs: object) -> sympy.Expr:
    return _mm(a, b)


def _addmm_activation_flop(bias: Shape, a: Shape, b: Shape, *args: object, **kwargs: object) -> sympy.Expr:
    return _mm(a, b)


def _mkldnn_conv_flop(x: Shape, w: Shape, *args: object, out_val: Shape, **kwargs: object) -> sympy.Expr:
    return ti.conv_flop_count(x, w, out_val, transposed=False)


_EXTRA: dict[str, FlopFormula] = {
    "mv": _mv_flop,
    "addmv": _addmv_flop,
    "dot": _dot_flop,
    "vdot": _dot_flop,
    "addbmm": _addbmm_flop,
    "_int_mm": _int_mm_flop,
    "_addmm_activation": _addmm_activation_flop,
    "mkldnn_convolution": _mkldnn_conv_flop,
}
_SDPA_FWD = ti.flop_registry[aten._scaled_dot_product_flash_attention]
_SDPA_BWD = ti.flop_registry[aten._scaled_dot_product_flash_attention_backward]
# Attention ops the registry lacks whose leading arguments are (q, k, v) / (grad_out, q, k, v).
_PROXY: dict[str, FlopFormula] = {
    "_scaled_dot_product_flash_attention_for_cpu": _SDPA_FWD,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _SDPA_BWD,
    "_scaled_dot_product_fused_attention_overrideable": _SDPA_FWD,
    "_scaled_dot_product_fused_attention_overrideable_backward": _SDPA_BWD,
    "_cudnn_attention_forward": _SDPA_FWD,
    "_cudnn_attention_backward": _SDPA_BWD,
    "scaled_dot_product_attention": _SDPA_FWD,
    "_scaled_dot_product_attention_math": _SDPA_FWD,
}
# Low-level kernels that take jagged (nested) inputs: (offsets arg, max_q arg, max_k arg).
_NESTED_ARGS: dict[str, tuple[str, str, str]] = {
    "_flash_attention_forward": ("cum_seq_q", "max_q", "max_k"),
    "_flash_attention_backward": ("cum_seq_q", "max_q", "max_k"),
    "_cudnn_attention_forward": ("cum_seq_q", "max_q", "max_k"),
    "_cudnn_attention_backward": ("cum_seq_q", "max_q", "max_k"),
    "_efficient_attention_forward": ("cu_seqlens_q", "max_seqlen_q", "max_seqlen_k"),
    "_efficient_attention_backward": ("cu_seqlens_q", "max_seqlen_q", "max_seqlen_k"),
}


def flop_formula(target: object) -> FlopFormula | None:
    """The formula for ``target``: the registry's, else ours; None if it has none."""
    key = target.overloadpacket if ti.is_op_overload(target) else target  # type: ignore[attr-defined]
    try:
        if key in ti.flop_registry:
            return ti.flop_registry[key]
    except TypeError:  # unhashable target
        return None
    name = base_name(target)
    return _PROXY.get(name) or _EXTRA.get(name)


def in_registry(target: object) -> bool:
    """Whether FlopCounterMode counts ``target`` (so our count must equal its count)."""
    key = target.overloadpacket if ti.is_op_overload(target) else target  # type: ignore[attr-defined]
    try:
        return key in ti.flop_registry
    except TypeError:
        return False


def _at_hints(expr: sympy.Expr, hints: SizeHints | None) -> sympy.Expr:
    """``expr`` itself, or with ``hints`` its integer value."""
    return sympy.Integer(hints.evaluate(expr)) if hints is not None else expr


def to_formula_args(value: Any, hints: SizeHints | None = None) -> Any:
    """Tensors -> :class:`Shape` of sympy sizes, SymInts -> sympy, recursively.

    With ``hints`` every size is replaced by its integer value (the fallback when a
    formula cannot handle symbolic sizes).
    """

    if is_tensor(value):
        return Shape(_at_hints(s, hints) for s in shape_of(value))
    if isinstance(value, torch.SymInt):
        return _at_hints(to_expr(value), hints)
    if isinstance(value, tuple):
        return tuple(to_formula_args(v, hints) for v in value)
    if isinstance(value, list):
        return [to_formula_args(v, hints) for v in value]
    if isinstance(value, dict):
        return {k: to_formula_args(v, hints) for k, v in value.items()}
    return value


def _low_level_attention_flops(
    name: str, bound: dict[str, Any], hints: SizeHints | None
) -> sympy.Expr | None:
    """FLOPs of the low-level flash/efficient/cuDNN kernels (None for other ops).

    Dense calls of ``_flash_attention_*``/``_efficient_attention_*`` take (batch, seq,
    heads, dim); the registry feeds those shapes to the (b, h, s, d) formula, swapping
    heads and sequence (FlopCounterMode then miscounts, or asserts when the query and key
    lengths differ). We transpose to (b, h, s, d) first: the count is the attention math,
    equal to FlopCounterMode's whenever heads == seq. Jagged calls: batch =
    ``len(offsets) - 1`` at the max lengths, as the registry computes on fake tensors.
    """
    spec = _NESTED_ARGS.get(name)
    if spec is None:
        return None
    backward = name.endswith("backward")
    q, k, v = (to_formula_args(bound[n], hints) for n in ("query", "key", "value"))
    if is_tensor(bound.get(spec[0])):  # jagged: (total, heads, dim) or (1, total, heads, dim)
        batch = _at_hints(numel(bound[spec[0]]), hints) - 1
        mq, mk = _at_hints(to_expr(bound[spec[1]]), hints), _at_hints(to_expr(bound[spec[2]]), hints)
        q4, k4, v4 = ((batch, t[-2], m, t[-1]) for t, m in ((q, mq), (k, mk), (v, mk)))
    elif name in BSHD_ATTENTION_OPS:
        q4, k4, v4 = ((t[0], t[2], t[1], t[3]) for t in (q, k, v))
    else:
        return None
    if backward:
        return ti.sdpa_backward_flop_count(q4, q4, k4, v4)
    return ti.sdpa_flop_count(q4, k4, v4)


def formula_flops(
    target: object, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, hints: SizeHints | None = None
) -> sympy.Expr | None:
    """FLOPs from the registry or our additions (None if no formula applies).

    ``args``/``kwargs``/``out`` hold meta values (fake tensors, SymInts). Raises whatever
    the formula raises; :func:`cost_model.node_cost` catches it.
    """
    formula = flop_formula(target)
    if formula is None:
        return None
    low_level = _low_level_attention_flops(base_name(target), ti.bind_args(target, args, kwargs), hints)
    if low_level is not None:
        return sympy.sympify(low_level)
    f_args = to_formula_args(tuple(args), hints)
    f_kwargs = to_formula_args(dict(kwargs), hints)
    f_out = to_formula_args(out, hints)
    return sympy.sympify(formula(*f_args, out_val=f_out, **f_kwargs))


def elementwise_flops(kind: OpKind, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> sympy.Expr:
    """FLOPs of ops without a formula: per output element (pointwise, random), per input
    element (reductions), else 0."""
    if kind in (OpKind.POINTWISE, OpKind.RANDOM):
        total: sympy.Expr = ZERO
        for t in tensors_in(out):
            total = total + numel(t)
        return total
    if kind is OpKind.REDUCTION:
        inputs = tensors_in((args, kwargs))
        return numel(inputs[0]) if inputs else ZERO
    return ZERO
