"""SymInt/int -> sympy conversion without guards.

Every size goes through :func:`to_expr`, which reads ``SymInt.node.expr`` (the sympy
expression, with the ShapeEnv's replacements applied) and never calls ``bool()``,
``int()`` or a comparison on a SymInt, so costing a graph adds no guard.
"""

from __future__ import annotations

from collections.abc import Iterable

import sympy
import torch

from .torch_internals import sym_expr

ZERO = sympy.Integer(0)
ONE = sympy.Integer(1)


def to_expr(value: object) -> sympy.Expr:
    """A sympy expression for an int-like ``value`` (int, SymInt, sympy expr)."""
    if isinstance(value, torch.SymInt):
        return sym_expr(value)
    if isinstance(value, bool):
        return sympy.Integer(int(value))
    if isinstance(value, int):
        return sympy.Integer(value)
    if isinstance(value, sympy.Expr):
        return value
    raise TypeError(f"not an int-like size: {type(value).__name__}")


def shape_of(tensor: torch.Tensor) -> tuple[sympy.Expr, ...]:
    """The tensor's sizes as sympy expressions."""
    return tuple(to_expr(s) for s in tensor.shape)


def stride_of(tensor: torch.Tensor) -> tuple[sympy.Expr, ...]:
    """The tensor's strides as sympy expressions."""
    return tuple(to_expr(s) for s in tensor.stride())


def product(values: Iterable[sympy.Expr]) -> sympy.Expr:
    """Product of expressions (1 for none)."""
    result: sympy.Expr = ONE
    for v in values:
        result = result * v
    return result


def numel(tensor: torch.Tensor) -> sympy.Expr:
    """Number of elements, symbolic."""
    return product(shape_of(tensor))


def is_tensor(value: object) -> bool:
    """A (fake) tensor with sizes we can read; sparse/nested layouts are not."""
    return isinstance(value, torch.Tensor) and value.layout == torch.strided


def flatten_values(value: object) -> list[object]:
    """Leaves of nested tuples/lists/dicts (meta vals of multi-output ops)."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in flatten_values(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in flatten_values(item)]
    return [value]


def tensors_in(value: object) -> list[torch.Tensor]:
    """The tensors among the leaves of ``value``."""
    return [v for v in flatten_values(value) if is_tensor(v)]  # type: ignore[misc]
