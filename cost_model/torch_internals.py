"""Every private PyTorch name the cost model uses, in one place.

The cost model's counterpart of ``recompute_pass/torch_internals/`` (``cost_model``
imports nothing from ``recompute_pass``, so it has its own boundary): torch internals move
between releases, and a torch upgrade should touch this file only. Checked against torch
2.13. ``tests/eager/test_torch_internals.py`` fails loudly if a name disappears or stops working.

What comes through here:

- operator schemas: ``OpOverload._schema`` (the op's qualified name, its arguments and
  their defaults);
- shape symbols: ``SymInt.node`` (its sympy ``expr`` and its ``shape_env``), a fake
  tensor's ``fake_mode.shape_env``, the ShapeEnv's tables (``backed_var_to_val``, or
  ``var_to_val`` before it was split; ``real_tensor_prop_unbacked_vals``; ``var_to_range``
  and its ``ValueRanges``) and ``torch.fx.experimental.symbolic_shapes``
  (``ShapeEnv``, ``free_unbacked_symbols``);
- ``torch._subclasses.fake_tensor.unset_fake_temporarily``: timing real kernels
  (``measure``) from inside a compile, where a fake mode may be active;
- ``torch.utils.flop_counter``'s registry and formula helpers (``flop_registry``,
  ``mm_flop``, ``bmm_flop``, ``conv_flop_count``, ``sdpa_flop_count``,
  ``sdpa_backward_flop_count``). Decision: semi-public, so routed here. The module has no
  underscore, but only ``FlopCounterMode`` is documented; the registry and the formulas'
  names and signatures are not a promise.

Used directly, as public API: ``torch.Tag``, the non-underscore attributes of operators
(``overloadpacket``, ``namespace``, ``tags``, ``is_view``, a higher-order op's
``name()``), ``torch.SymInt``/``SymFloat``/``SymBool``, ``torch.fx`` (``map_arg``) and
``torch.utils.flop_counter.FlopCounterMode``.

The ShapeEnv readers take missing tables as empty (as the cost model always did), so a
renamed table would degrade hints silently; the test asserts each table exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sympy
import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_unbacked_symbols
from torch.utils.flop_counter import (
    bmm_flop,
    conv_flop_count,
    flop_registry,
    mm_flop,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

__all__ = [
    "ShapeEnv",
    "backed_values",
    "bind_args",
    "bmm_flop",
    "conv_flop_count",
    "flop_registry",
    "free_unbacked_symbols",
    "is_op_overload",
    "mm_flop",
    "real_tensor_values",
    "schema_name",
    "sdpa_backward_flop_count",
    "sdpa_flop_count",
    "shape_env_of",
    "sym_expr",
    "symbol_bounds",
    "unset_fake_temporarily",
]


# -- operator schemas --------------------------------------------------------------------


def is_op_overload(target: object) -> bool:
    """An ATen/prims/custom ``OpOverload`` (duck-typed: no import of ``torch._ops``)."""
    return hasattr(target, "_schema") and hasattr(target, "overloadpacket")


def schema_name(target: object) -> str:
    """The qualified name in an op's schema: ``aten::mm`` for ``aten.mm.default``."""
    return str(target._schema.name)  # type: ignore[attr-defined]


def bind_args(target: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Arguments by schema name, defaults filled in ({} for targets without a schema)."""
    if not is_op_overload(target):
        return {}
    bound: dict[str, Any] = {}
    positional = list(args)
    for arg in target._schema.arguments:  # type: ignore[attr-defined]
        if not arg.kwarg_only and positional:
            bound[arg.name] = positional.pop(0)
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


# -- shape symbols -------------------------------------------------------------------------


def sym_expr(value: torch.SymInt) -> sympy.Expr:
    """The sympy expression of a SymInt (the ShapeEnv's replacements applied); no guard."""
    return sympy.sympify(value.node.expr)


def shape_env_of(value: object) -> ShapeEnv | None:
    """The ShapeEnv of a SymInt/SymFloat/SymBool or of a fake tensor (None for others)."""
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return getattr(value.node, "shape_env", None)
    fake_mode = getattr(value, "fake_mode", None)
    return getattr(fake_mode, "shape_env", None)


def backed_values(shape_env: ShapeEnv) -> Mapping[sympy.Symbol, object]:
    """Each backed symbol's traced value (``backed_var_to_val``, older torch ``var_to_val``)."""
    backed = getattr(shape_env, "backed_var_to_val", None)
    if backed is None:
        backed = getattr(shape_env, "var_to_val", {})
    return backed


def real_tensor_values(shape_env: ShapeEnv) -> Mapping[sympy.Symbol, object]:
    """Unbacked symbols' values seen under real-tensor propagation (empty without it)."""
    return getattr(shape_env, "real_tensor_prop_unbacked_vals", {})


def symbol_bounds(shape_env: ShapeEnv, symbol: sympy.Symbol) -> tuple[object, object]:
    """(lower, upper) of a symbol's known value range; (None, None) if it has none."""
    value_range = getattr(shape_env, "var_to_range", {}).get(symbol)
    return getattr(value_range, "lower", None), getattr(value_range, "upper", None)
