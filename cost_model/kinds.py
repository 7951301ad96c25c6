"""Op classification: what kind of kernel a joint-graph node becomes.

The kind decides how a node is costed (FLOP formula, roofline rate) and lets the
partitioner reason about groups of ops (e.g. "save GEMM outputs only").

Decisions:
- POINTWISE: ``torch.Tag.pointwise`` in the op's tags (this includes ``clone``, ``where``,
  ``prims.convert_element_type``), plus ``_to_copy`` (a dtype/device cast, one op per
  element). ``copy``/``copy_`` are DATA_MOVEMENT: they move bytes, computing nothing.
- VIEW: ``op.is_view`` (the schema returns an alias of an input: ``view``, ``permute``,
  ``alias``, ``detach``, ``reshape``, ``split``...), ``_unsafe_view``, ``lift_fresh`` and
  ``operator.getitem``. Views cost nothing and allocate nothing.
- RANDOM: ``torch.Tag.nondeterministic_seeded`` in the tags, and Inductor's
  ``prims.inductor_seeds``/``inductor_random``/``inductor_randint`` and the rng HOPs.
  See :func:`draws_fresh_randomness` for which of them are *random* (``is_random``).
- Attention ops are ATTENTION even when tagged ``nondeterministic_seeded`` (CPU flash
  attention is, because of its dropout argument).
"""

from __future__ import annotations

import enum
import operator

import torch
from torch import fx

from .op_names import (
    ATTENTION_BWD_OPS,
    ATTENTION_OPS,
    COLLECTIVE_NAMESPACES,
    CONSTRUCTOR_OPS,
    CONV_OPS,
    DATA_MOVEMENT_OPS,
    FRESH_RANDOM_OPS,
    GEMM_OPS,
    INDUCTOR_RANDOM_OPS,
    POINTWISE_OPS,
    RANDOM_HOPS,
    REDUCTION_OPS,
    SYM_OPS,
    VIEW_OPS,
)
from .torch_internals import bind_args, is_op_overload, schema_name


class OpKind(str, enum.Enum):
    """How a node is costed; the value is the lower-case name (stable in reports/JSON)."""

    NONE = "none"  # placeholder/output/get_attr/SymInt arithmetic: no kernel
    VIEW = "view"  # aliases an input: no kernel, no allocation
    POINTWISE = "pointwise"
    REDUCTION = "reduction"
    GEMM = "gemm"
    CONV = "conv"
    ATTENTION = "attention"
    RANDOM = "random"
    DATA_MOVEMENT = "data_movement"  # cat/index/gather/scatter/copy/factories: bytes only
    COLLECTIVE = "collective"
    UNKNOWN = "unknown"  # not modelled: conservative bytes-bound estimate


MATRIX_KINDS = frozenset({OpKind.GEMM, OpKind.CONV, OpKind.ATTENTION})
"""Compute-bound kernels: costed at the matrix units' FLOP rate, and the outputs that
selective recomputation saves."""


def is_higher_order_op(target: object) -> bool:
    """A higher-order operator such as ``torch.ops.higher_order.flex_attention``."""
    return not is_op_overload(target) and getattr(target, "namespace", None) == "higher_order"


def base_name(target: object) -> str:
    """Name without namespace and overload: ``mm`` for ``aten.mm.default``, ``flex_attention``."""
    if is_op_overload(target):
        return schema_name(target).split("::", 1)[-1]
    if is_higher_order_op(target):
        return str(target.name())  # type: ignore[attr-defined]
    return str(getattr(target, "__name__", target))


def op_name(target: object) -> str:
    """Stable display name: ``aten.mm.default``, ``operator.getitem``, ``flex_attention``."""
    if is_op_overload(target) or isinstance(target, str):
        return str(target)
    if is_higher_order_op(target):
        return base_name(target)
    module = getattr(target, "__module__", None) or ""
    module = {"_operator": "operator", "builtins": ""}.get(module, module)
    name = base_name(target)
    return f"{module}.{name}" if module else name


def _is_symbolic_scalar(val: object) -> bool:
    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


def _is_scalar_function(target: object) -> bool:
    """``operator.*``, ``math.*`` and ``torch.sym_*``: host-side scalar arithmetic."""
    module = getattr(target, "__module__", None)
    return module in ("_operator", "operator", "math") or base_name(target).startswith("sym_")


def is_constructor(node: fx.Node) -> bool:
    """A factory that reads no tensor (``CONSTRUCTOR_OPS``: ``full``, ``arange``, ``iota``...).
    Classified DATA_MOVEMENT, as run alone; under Inductor it costs nothing of its own."""
    return (
        node.op == "call_function"
        and is_op_overload(node.target)
        and base_name(node.target) in CONSTRUCTOR_OPS
        and not any(isinstance(n.meta.get("val"), torch.Tensor) for n in node.all_input_nodes)
    )


def classify(node: fx.Node) -> OpKind:
    """The :class:`OpKind` of ``node``; never raises (anything odd is UNKNOWN)."""
    if node.op in ("placeholder", "output", "get_attr"):
        return OpKind.NONE
    if node.op != "call_function":
        return OpKind.UNKNOWN
    return classify_target(node.target, node.meta.get("val"))


def classify_target(target: object, val: object = None) -> OpKind:
    """The :class:`OpKind` of a call target; ``val`` (the output) tells SymInt arithmetic apart."""
    if target is operator.getitem:
        return OpKind.VIEW
    if is_higher_order_op(target):
        name = base_name(target)
        if name in ATTENTION_OPS:
            return OpKind.ATTENTION
        return OpKind.RANDOM if name in RANDOM_HOPS else OpKind.UNKNOWN
    if not is_op_overload(target):
        # Python callables in AOT graphs are SymInt arithmetic (operator.mul, sym_max...).
        return OpKind.NONE if _is_symbolic_scalar(val) or _is_scalar_function(target) else OpKind.UNKNOWN
    name = base_name(target)
    namespace = getattr(target, "namespace", "")
    tags = set(getattr(target, "tags", ()))
    if namespace in COLLECTIVE_NAMESPACES:
        return OpKind.COLLECTIVE
    if name in SYM_OPS:
        return OpKind.NONE
    if name in ATTENTION_OPS:
        return OpKind.ATTENTION
    if name in GEMM_OPS:
        return OpKind.GEMM
    if name in CONV_OPS:
        return OpKind.CONV
    if getattr(target, "is_view", False) or name in VIEW_OPS:
        return OpKind.VIEW
    if torch.Tag.nondeterministic_seeded in tags or name in INDUCTOR_RANDOM_OPS:
        return OpKind.RANDOM
    if name in DATA_MOVEMENT_OPS or torch.Tag.view_copy in tags:
        return OpKind.DATA_MOVEMENT
    if torch.Tag.pointwise in tags or name in POINTWISE_OPS:
        return OpKind.POINTWISE
    if torch.Tag.reduction in tags or name in REDUCTION_OPS:
        return OpKind.REDUCTION
    return OpKind.UNKNOWN


def draws_fresh_randomness(
    target: object, args: tuple[object, ...] = (), kwargs: dict[str, object] | None = None
) -> bool:
    """Whether running the op again gives different values (so recomputing it is wrong).

    ``nondeterministic_seeded`` ops draw from the generator; ``inductor_seeds`` makes new
    seeds; ``run_and_save_rng_state`` consumes state. ``inductor_random``/``inductor_randint``
    and ``run_with_rng_state`` are pure functions of their seed/state input: recomputing
    them (with the saved seed) reproduces the same values, so they are RANDOM but not
    random. Attention forwards draw only with a non-zero ``dropout_p``; backwards replay
    the forward's RNG state.
    """
    name = base_name(target)
    if name in ATTENTION_OPS:
        if name in ATTENTION_BWD_OPS:
            return False
        dropout = _dropout_p(target, args, kwargs or {})
        return dropout is None or not isinstance(dropout, (int, float)) or dropout != 0
    if name in FRESH_RANDOM_OPS:
        return True
    if is_op_overload(target):
        return torch.Tag.nondeterministic_seeded in set(getattr(target, "tags", ()))
    return False


def _dropout_p(target: object, args: tuple[object, ...], kwargs: dict[str, object]) -> object:
    """The ``dropout_p`` argument (0.0 when the schema has none, or it has no value)."""
    return bind_args(target, args, kwargs).get("dropout_p", 0.0)
