"""Scale a GEMM's small output, not its large input, where the input is stored anyway.

A scaled branch such as LoRA's ``B(A(x)) * scaling`` has, in backward, the gradient
``g * scaling`` feeding only GEMMs (``B``'s weight gradient and ``A``'s output gradient),
while ``g`` itself feeds other GEMMs (the frozen base's input gradient). Both are GEMM
inputs, so Inductor stores both: two activation-sized buffers where one holds the same
information. Scaling the GEMMs' outputs instead (rank-sized here) frees one of them.

Only a power-of-two scale is moved: multiplying by one is exact in floating point (short of
overflow and subnormal results), so the gradients are bit-equal to those of the graph as
traced; any other scale would change roundings, and is left where it is.
"""

from __future__ import annotations

import math

import torch
from torch import fx

from cost_model import SizeHints
from cost_model.symbolic import to_expr
from recompute_pass.extract.rebuild import holds_more

_MUL = torch.ops.aten.mul.Tensor
_SCALES = (_MUL, torch.ops.aten.mul.Scalar)
_GEMMS = (torch.ops.aten.mm.default, torch.ops.aten.bmm.default)
# Single-input views a GEMM operand passes through (transposes and reshapes of a gradient).
_VIEWS = (
    torch.ops.aten.view.default,
    torch.ops.aten._unsafe_view.default,
    torch.ops.aten.reshape.default,
    torch.ops.aten.permute.default,
    torch.ops.aten.t.default,
    torch.ops.aten.transpose.int,
)


def hoist_scales(backward: fx.GraphModule, hints: SizeHints) -> tuple[str, ...]:
    """Moves, in place, each power-of-two scale read only by GEMMs (through views) onto
    their outputs, where the unscaled value is a GEMM input too and the outputs hold fewer
    bytes than it; returns the names of the scales removed."""
    graph = backward.graph
    hoisted: list[str] = []
    for node in list(graph.nodes):
        scale = _power_of_two_scale(node)
        if scale is None:
            continue
        unscaled = node.args[0]
        gemms = _gemm_readers(node)
        if not gemms or not _stored_anyway(unscaled, node) or not _same_layout(unscaled, node):
            continue
        if not holds_more([node], list(gemms), hints):
            continue
        node.replace_all_uses_with(unscaled)
        for gemm, operands in gemms.items():
            with graph.inserting_after(gemm):
                scaled = graph.call_function(_MUL, (gemm, scale**operands))
            scaled.meta = dict(gemm.meta)
            gemm.replace_all_uses_with(scaled, delete_user_cb=lambda user, s=scaled: user is not s)
        graph.erase_node(node)
        hoisted.append(node.name)
    if hoisted:
        backward.recompile()
    return tuple(hoisted)


def _power_of_two_scale(node: fx.Node) -> float | None:
    """``c`` where ``node`` is ``x * c`` of a floating tensor ``x`` and a power of two ``c``."""
    if node.op != "call_function" or node.target not in _SCALES or node.kwargs or len(node.args) != 2:
        return None
    value, scale = node.args
    if not isinstance(value, fx.Node) or isinstance(scale, bool) or not isinstance(scale, (int, float)):
        return None
    if not math.isfinite(scale) or scale == 0 or math.frexp(abs(scale))[0] != 0.5:
        return None
    val = value.meta.get("val")
    if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
        return None
    return float(scale)


def _gemm_readers(node: fx.Node) -> dict[fx.Node, int]:
    """Each GEMM reading ``node`` through views, with how many of its operands do; empty
    unless every path from ``node`` ends at a GEMM operand."""
    gemms: dict[fx.Node, int] = {}
    stack = [node]
    while stack:
        current = stack.pop()
        for user in current.users:
            if user.op == "call_function" and user.target in _VIEWS and user.args[0] is current:
                stack.append(user)
            elif user.op == "call_function" and user.target in _GEMMS and current in user.args[:2]:
                gemms[user] = gemms.get(user, 0) + user.args[:2].count(current)
            else:
                return {}
    return gemms


def _stored_anyway(value: object, scaled: fx.Node) -> bool:
    """Whether ``value`` is a buffer whatever happens to ``scaled``: a graph input, or read
    by some other node that is not computed inside its reader's kernel."""
    if not isinstance(value, fx.Node):
        return False
    if value.op == "placeholder":
        return True
    stack = [user for user in value.users if user is not scaled]
    while stack:
        user = stack.pop()
        if user.op == "output" or (user.op == "call_function" and user.target in _GEMMS):
            return True
        if user.op == "call_function" and user.target in _VIEWS:
            stack.extend(user.users)
    return False


def _same_layout(value: object, scaled: fx.Node) -> bool:
    """The views read ``value`` in place of ``scaled`` only if it has the same shape and strides."""
    got, want = (n.meta.get("val") if isinstance(n, fx.Node) else None for n in (value, scaled))
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
        return False
    same = got.dtype == want.dtype and got.dim() == want.dim()
    return same and all(
        to_expr(a) == to_expr(b)
        for a, b in zip((*got.shape, *got.stride()), (*want.shape, *want.stride()), strict=True)
    )
