"""Size hints: the concrete value of each shape symbol, to turn costs into numbers.

Backed symbols (``s0``...) take the value they were traced with
(``ShapeEnv.backed_var_to_val``). Unbacked symbols (``u0``..., data-dependent sizes such as
the length of ``nonzero``'s output) have no such value: they take the value seen under
real-tensor propagation if there is one, else ``unbacked_hint`` (default 4096, a typical
sequence/token count), clamped to the symbol's known value range. Evaluating substitutes
integers into the expression: no SymInt is touched, so no guard can be added.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import sympy
import torch
from torch import fx

from . import torch_internals as ti
from ._log import log_once
from .symbolic import flatten_values, is_tensor, to_expr

logger = logging.getLogger(__name__)

DEFAULT_UNBACKED_HINT = 4096


@dataclass(frozen=True)
class SizeHints:
    """Maps shape symbols to ints; symbols it lacks evaluate at ``unbacked_hint``."""

    values: Mapping[sympy.Symbol, int] = field(default_factory=dict)
    unbacked_hint: int = DEFAULT_UNBACKED_HINT

    def __post_init__(self) -> None:
        if isinstance(self.unbacked_hint, bool) or not isinstance(self.unbacked_hint, int):
            raise ValueError(f"unbacked_hint must be an int, got {self.unbacked_hint!r}")
        if self.unbacked_hint < 0:
            raise ValueError(f"unbacked_hint must be >= 0, got {self.unbacked_hint}")
        object.__setattr__(self, "values", MappingProxyType({k: int(v) for k, v in self.values.items()}))

    @classmethod
    def static(cls) -> SizeHints:
        """Hints for a graph without shape symbols."""
        return cls()

    @classmethod
    def from_shape_env(
        cls,
        shape_env: ti.ShapeEnv | None,
        symbols: Iterable[sympy.Symbol] = (),
        *,
        unbacked_hint: int = DEFAULT_UNBACKED_HINT,
    ) -> SizeHints:
        """Hints for every backed symbol of ``shape_env`` and for the given (unbacked) ``symbols``."""
        if shape_env is None:
            return cls(unbacked_hint=unbacked_hint)
        values: dict[sympy.Symbol, int] = {}
        for sym, val in ti.backed_values(shape_env).items():
            if isinstance(val, sympy.Integer):  # skip nested ints / float symbols
                values[sym] = int(val)
        real = ti.real_tensor_values(shape_env)
        for sym in symbols:
            if sym in values:
                continue
            if sym in real and isinstance(real[sym], sympy.Integer):
                values[sym] = int(real[sym])
            else:
                values[sym] = _clamp(unbacked_hint, *ti.symbol_bounds(shape_env, sym))
        return cls(values, unbacked_hint)

    @classmethod
    def from_graph(
        cls, graph: fx.Graph | fx.GraphModule, *, unbacked_hint: int = DEFAULT_UNBACKED_HINT
    ) -> SizeHints:
        """Hints for the symbols of a traced graph (static graphs give empty hints)."""
        if isinstance(graph, fx.GraphModule):
            graph = graph.graph
        shape_env: ti.ShapeEnv | None = None
        symbols: dict[sympy.Symbol, None] = {}
        for node in graph.nodes:
            for leaf in flatten_values(node.meta.get("val")):
                if shape_env is None:
                    shape_env = ti.shape_env_of(leaf)
                for expr in _exprs_of(leaf):
                    symbols.update(dict.fromkeys(sorted(expr.free_symbols, key=str)))
        return cls.from_shape_env(shape_env, symbols, unbacked_hint=unbacked_hint)

    def override(self, values: Mapping[sympy.Symbol, int]) -> SizeHints:
        """These hints with some symbols evaluated elsewhere: what a plan for another size
        than the traced one reads (``RecomputeOptions.plan_sizes``)."""
        return SizeHints({**self.values, **values}, self.unbacked_hint)

    def hint(self, symbol: sympy.Symbol) -> int:
        """The value of one symbol (``unbacked_hint`` if unknown, logged once)."""
        if symbol in self.values:
            return self.values[symbol]
        log_once(logger, logging.INFO, "no hint: unbacked_hint used", str(symbol), str(self.unbacked_hint))
        return self.unbacked_hint

    def substitute(self, expr: sympy.Expr) -> sympy.Expr:
        """``expr`` with every free symbol replaced by its hint."""
        return expr.xreplace({s: sympy.Integer(self.hint(s)) for s in expr.free_symbols})

    def evaluate(self, expr: sympy.Expr | int) -> int:
        """``expr`` at the hints, as an int (truncated if the expression is fractional)."""
        value = self.substitute(sympy.sympify(expr))
        if not value.is_number:
            raise ValueError(f"cannot evaluate {expr} to a number (left with {value})")
        return int(value)


def _clamp(value: int, lower: object, upper: object) -> int:
    """``value`` clamped into a symbol's bounds (each ignored if absent or infinite)."""
    if isinstance(lower, (int, sympy.Integer)) and value < int(lower):
        value = int(lower)
    if isinstance(upper, (int, sympy.Integer)) and value > int(upper):
        value = int(upper)
    return value


def _exprs_of(value: object) -> list[sympy.Expr]:
    """Size, stride and offset expressions of a tensor, or the expression of a SymInt."""
    try:
        if isinstance(value, torch.SymInt):
            return [to_expr(value)]
        if is_tensor(value):
            assert isinstance(value, torch.Tensor)
            ints = [*value.shape, *value.stride(), value.storage_offset()]
            return [to_expr(i) for i in ints]
    except (TypeError, AssertionError, RuntimeError):  # nested ints, odd SymNodes
        return []
    return []
