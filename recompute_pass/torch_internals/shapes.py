"""Symbolic shapes and fake tensors: symbols' sources and hints, and the fake mode
a graph's values live in."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import sympy
import torch
from torch._dynamo.source import LocalSource, TensorProperty, TensorPropertySource
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.proxy_tensor import is_sym_node
from torch.fx.experimental.symbolic_shapes import ShapeEnv

__all__ = [
    "FakeTensor",
    "ShapeEnv",
    "detect_fake_mode",
    "input_dim_of",
    "is_fake_tensor",
    "is_sym_node",
    "shape_env_hints",
    "symbol_sources",
    "symint_of",
]


def symint_of(shape_env: ShapeEnv, expr: sympy.Expr) -> int | torch.SymInt:
    """``expr`` over ``shape_env``'s symbols as a size a fake tensor can take."""
    if expr.is_number:
        return int(expr)
    return shape_env.create_symintnode(expr, hint=None)


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
