"""Per-node cost record: FLOPs and bytes of one joint-graph node, symbolic in shapes.

Rules (see ``flops``, ``storage``, ``attention`` and ``kinds`` for the details):

- ``bytes_out``: bytes the node writes, :func:`tensor_bytes` of its output (0 for views,
  NONE nodes and allocation-only ops such as ``empty_strided``).
- ``bytes_in``: bytes it reads, the sum of :func:`tensor_bytes` over its *distinct* tensor
  inputs (``mul(x, x)`` reads ``x`` once). Gathers (``embedding``, ``index``, ``gather``,
  ``index_select``) read only the gathered rows: indices plus output-sized source bytes;
  ``*_like``/``new_*`` factories read nothing (their tensor argument is a template).
- ``dtype``: the inputs' dtype for GEMM/CONV/ATTENTION (the dtype the matrix units run
  at), else the output's.

Fallbacks (never an exception; each reason logged once per op):

- unknown op (custom op, unknown HOP): UNKNOWN, ``flops = 0``, bytes as above (a
  bytes-bound estimate), ``known=False``; WARNING.
- no ``meta["val"]``: ``flops = 0``, ``bytes_out = 0``, ``bytes_in`` from the inputs that
  have one, ``known=False``; INFO.
- unbacked SymInts (``u0``...) in the output or inputs: the expressions are built as usual
  over the unbacked symbols, which :class:`SizeHints` evaluates at its ``unbacked_hint``;
  ``known=False`` because the numbers rest on that guess; INFO.
- a formula that cannot take symbolic sizes: evaluated at the size hints (a constant);
  INFO. If that fails too: ``flops = 0``, ``known=False``; WARNING.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch import fx
from torch.fx.node import map_arg

from ._log import log_once
from .attention import work_fraction
from .flops import elementwise_flops, formula_flops
from .hints import SizeHints
from .kinds import MATRIX_KINDS, OpKind, base_name, classify, draws_fresh_randomness, op_name
from .op_names import ALLOC_ONLY_OPS, GATHER_OPS, TEMPLATE_OPS
from .storage import tensor_bytes
from .symbolic import ZERO, flatten_values, tensors_in
from .torch_internals import bind_args, free_unbacked_symbols

logger = logging.getLogger(__name__)

_MISSING = object()


@dataclass(frozen=True)
class ConcreteCost:
    """A :class:`NodeCost` evaluated at size hints (plain ints)."""

    op: str
    kind: OpKind
    flops: int
    effective_flops: int
    bytes_in: int
    bytes_out: int
    dtype: torch.dtype | None
    is_random: bool
    known: bool

    @property
    def total_bytes(self) -> int:
        """Bytes moved: read plus written."""
        return self.bytes_in + self.bytes_out


@dataclass(frozen=True)
class NodeCost:
    """Cost of one node: sympy expressions over the graph's shape symbols.

    ``flops`` equals FlopCounterMode's count for registry ops (plus our documented
    additions); ``effective_flops`` is the work the kernel executes (less for causal
    attention and sparse flex attention), which is what :func:`estimate_runtime` uses.
    """

    op: str
    kind: OpKind
    flops: sympy.Expr
    bytes_in: sympy.Expr
    bytes_out: sympy.Expr
    dtype: torch.dtype | None
    is_random: bool
    known: bool
    effective_flops: sympy.Expr

    @property
    def total_bytes(self) -> sympy.Expr:
        """Bytes moved: read plus written."""
        return self.bytes_in + self.bytes_out

    @property
    def free_symbols(self) -> set[sympy.Symbol]:
        """Shape symbols the cost depends on (empty for static shapes)."""
        exprs = (self.flops, self.effective_flops, self.bytes_in, self.bytes_out)
        return set().union(*(e.free_symbols for e in exprs))

    def evaluate(self, hints: SizeHints | None = None) -> ConcreteCost:
        """The cost at ``hints`` (default: no symbols, static shapes)."""
        hints = hints if hints is not None else SizeHints.static()
        return ConcreteCost(
            op=self.op,
            kind=self.kind,
            flops=hints.evaluate(self.flops),
            effective_flops=hints.evaluate(self.effective_flops),
            bytes_in=hints.evaluate(self.bytes_in),
            bytes_out=hints.evaluate(self.bytes_out),
            dtype=self.dtype,
            is_random=self.is_random,
            known=self.known,
        )


def node_cost(node: fx.Node) -> NodeCost:
    """Cost of ``node`` of an AOTAutograd graph; never raises (see the module's fallbacks)."""
    name = str(node.target)
    try:
        name = op_name(node.target) if node.op == "call_function" else node.op
        return _node_cost(node, name)
    except Exception as exc:  # a cost model bug must not break compilation
        log_once(logger, logging.WARNING, "cost model error, using bytes-only fallback", name, repr(exc))
        # Assume a seeded op draws fresh randomness: claiming otherwise could get it
        # recomputed with a different result.
        random = torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
        return _cost(name, OpKind.UNKNOWN, ZERO, _safe(lambda: _bytes_in(node)), ZERO, None, random, False)


def _safe(fn: Any) -> sympy.Expr:
    try:
        return fn()
    except Exception:
        return ZERO


def _cost(
    name: str,
    kind: OpKind,
    flops: sympy.Expr,
    bytes_in: sympy.Expr,
    bytes_out: sympy.Expr,
    dtype: torch.dtype | None,
    is_random: bool,
    known: bool,
    effective_flops: sympy.Expr | None = None,
) -> NodeCost:
    flops = sympy.sympify(flops)
    return NodeCost(
        op=name,
        kind=kind,
        flops=flops,
        bytes_in=sympy.sympify(bytes_in),
        bytes_out=sympy.sympify(bytes_out),
        dtype=dtype,
        is_random=is_random,
        known=known,
        effective_flops=flops if effective_flops is None else sympy.sympify(effective_flops),
    )


def _node_cost(node: fx.Node, name: str) -> NodeCost:
    kind = classify(node)
    val = node.meta.get("val", _MISSING)
    if kind in (OpKind.NONE, OpKind.VIEW):
        dtype = _first_dtype(val) if val is not _MISSING else None
        return _cost(name, kind, ZERO, ZERO, ZERO, dtype, False, True)

    target = node.target
    args: tuple[Any, ...] = map_arg(node.args, _val_of)  # type: ignore[assignment]
    kwargs: dict[str, Any] = map_arg(node.kwargs, _val_of)  # type: ignore[assignment]
    is_random = kind in (OpKind.RANDOM, OpKind.ATTENTION) and draws_fresh_randomness(target, args, kwargs)

    if val is _MISSING:
        log_once(logger, logging.INFO, "no meta['val']: flops 0, bytes from inputs", name)
        return _cost(name, kind, ZERO, _bytes_in(node), ZERO, _first_dtype((args, kwargs)), is_random, False)

    known = True
    if kind is OpKind.UNKNOWN:
        log_once(logger, logging.WARNING, "unknown op: bytes-bound estimate", name)
        known = False
    if _has_unbacked(val) or _has_unbacked((args, kwargs)):
        log_once(logger, logging.INFO, "unbacked SymInt: sizes evaluate at the unbacked hint", name)
        known = False

    bytes_in = ZERO if base_name(target) in TEMPLATE_OPS else _bytes_in(node)
    bytes_out = ZERO if base_name(target) in ALLOC_ONLY_OPS else tensor_bytes(val)
    flops, formula_ok = _flops(node, name, kind, args, kwargs, val)
    known = known and formula_ok
    if kind in MATRIX_KINDS:
        dtype = _first_dtype((args, kwargs)) or _first_dtype(val)
    else:
        dtype = _first_dtype(val) or _first_dtype((args, kwargs))
    fraction = work_fraction(base_name(target), bind_args(target, args, kwargs), node.meta)
    return _cost(name, kind, flops, bytes_in, bytes_out, dtype, is_random, known, flops * fraction)


def _flops(
    node: fx.Node, name: str, kind: OpKind, args: tuple[Any, ...], kwargs: dict[str, Any], val: Any
) -> tuple[sympy.Expr, bool]:
    """FLOPs and whether they could be computed (symbolically, else at the hints)."""
    try:
        flops = formula_flops(node.target, args, kwargs, val)
    except Exception as exc:
        log_once(logger, logging.INFO, "symbolic FLOP formula failed, using size hints", name, repr(exc))
        try:
            flops = formula_flops(node.target, args, kwargs, val, SizeHints.from_graph(node.graph))
        except Exception as exc2:
            log_once(logger, logging.WARNING, "FLOP formula failed: flops 0", name, repr(exc2))
            return ZERO, False
    if flops is None:
        flops = elementwise_flops(kind, args, kwargs, val)
    return flops, True


def _val_of(node: fx.Node) -> Any:
    return node.meta.get("val")


def _bytes_in(node: fx.Node) -> sympy.Expr:
    """Bytes read from the node's distinct tensor inputs (gathers: only what they gather)."""
    inputs: dict[fx.Node, None] = {}
    map_arg((node.args, node.kwargs), lambda n: inputs.setdefault(n))
    gather = node.op == "call_function" and base_name(node.target) in GATHER_OPS
    source = _gather_source(node) if gather else None
    total: sympy.Expr = ZERO
    for inp in inputs:
        if inp is source:
            total = total + tensor_bytes(node.meta.get("val"))  # one read per gathered element
        else:
            total = total + tensor_bytes(inp.meta.get("val"))
    return total


def _gather_source(node: fx.Node) -> fx.Node | None:
    """The tensor a gather reads from: ``weight`` for embedding, ``self`` otherwise."""
    first = node.args[0] if node.args else None
    return first if isinstance(first, fx.Node) else None


def _has_unbacked(value: Any) -> bool:
    leaves = [v for v in flatten_values(value) if isinstance(v, (torch.Tensor, torch.SymInt))]
    return bool(leaves) and bool(free_unbacked_symbols(leaves))


def _first_dtype(value: Any) -> torch.dtype | None:
    tensors = tensors_in(value)
    return tensors[0].dtype if tensors else None
