"""Operator schemas: what an op writes, whether it aliases an input, whether it is pure."""

from __future__ import annotations

from torch import fx
from torch._ops import HigherOrderOperator, OpOverload

__all__ = [
    "HigherOrderOperator",
    "OpOverload",
    "is_functional_op",
    "returns_an_alias",
    "written_arguments",
]


def is_functional_op(target: object) -> bool:
    """Whether an operator's schema proves it pure: no mutated argument, no aliased result.

    A custom op declares its mutations (``torch.library.custom_op(mutates_args=...)``), so
    one whose schema shows none computes a fresh value from its inputs and may be recomputed.
    """
    if not isinstance(target, OpOverload):
        return False
    schema = target._schema
    return not schema.is_mutable and all(r.alias_info is None for r in schema.returns)


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
