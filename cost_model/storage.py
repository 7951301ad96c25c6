"""Bytes a tensor occupies, symbolic in its sizes and strides.

:func:`tensor_bytes` is the storage *span* of a tensor: the bytes from its first to its
last addressed element, ``itemsize * (1 + sum((size_i - 1) * stride_i))`` (0 if it has
no elements). Why the span rather than ``numel * itemsize``:

- dense tensors, contiguous or permuted (channels-last, transposed): span == numel, so
  the two agree;
- expanded tensors (stride 0): the span counts the one element each broadcast row really
  stores, not the broadcast size (an ``expand`` to 1e6 rows of a 4-byte scalar is 4 bytes);
- tensors with gaps (``empty_strided`` with padded strides, a strided slice): the span is
  what the allocation holds and what stays alive if the tensor is saved.

Strides are assumed non-negative (torch has no negative strides) and backed sizes >= 2
(ShapeEnv specialises 0 and 1), so no comparison on a symbol is needed. A statically
empty tensor (some size is the int 0) is 0 bytes.
"""

from __future__ import annotations

import sympy
import torch

from .symbolic import ONE, ZERO, flatten_values, is_tensor, shape_of, stride_of


def element_span(tensor: torch.Tensor) -> sympy.Expr:
    """Elements from the first to the last addressed element, inclusive."""
    sizes, strides = shape_of(tensor), stride_of(tensor)
    if any(s == 0 for s in sizes):  # structural: only a literal 0 matches, no guard
        return ZERO
    span: sympy.Expr = ONE
    for size, stride in zip(sizes, strides, strict=True):
        span = span + (size - 1) * stride
    return sympy.expand(span)


def tensor_bytes(value: object) -> sympy.Expr:
    """Bytes of a (fake) tensor's storage span; tuples/lists sum; SymInts, None, others 0."""
    total: sympy.Expr = ZERO
    for leaf in flatten_values(value):
        if is_tensor(leaf):
            assert isinstance(leaf, torch.Tensor)
            total = total + element_span(leaf) * leaf.dtype.itemsize
    return total
