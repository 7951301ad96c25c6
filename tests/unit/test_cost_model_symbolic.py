"""Dynamic shapes: costs are sympy expressions in the graph's symbols, evaluated without guards."""

from __future__ import annotations

import collections

import pytest
import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from cost_model import PROFILES, OpKind, SizeHints, estimate_runtime, node_cost
from cost_model.kinds import base_name
from cost_model.symbolic import shape_of
from tests.support.cost_model_graphs import MODELS, call_nodes, joint_graphs


def _shape_env(gm: torch.fx.GraphModule):
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            return val.fake_mode.shape_env
    raise AssertionError("no fake tensor in graph")


def test_bmm_flops_are_2bmnk_in_graph_symbols() -> None:
    a, b = torch.randn(3, 5, 7), torch.randn(3, 7, 11)
    gm = make_fx(torch.bmm, tracing_mode="symbolic")(a, b)
    node = next(n for n in call_nodes(gm) if base_name(n.target) == "bmm")
    lhs, rhs = (arg.meta["val"] for arg in node.args)
    (bs, m, k), (_, _, n) = shape_of(lhs), shape_of(rhs)
    assert len({bs, m, k, n}) == 4 and all(isinstance(s, sympy.Symbol) for s in (bs, m, k, n))
    cost = node_cost(node)
    assert sympy.simplify(cost.flops - 2 * bs * m * n * k) == 0
    assert cost.flops.free_symbols == {bs, m, n, k}
    assert sympy.simplify(cost.bytes_out - 4 * bs * m * n) == 0
    assert sympy.simplify(cost.bytes_in - 4 * (bs * m * k + bs * k * n)) == 0
    static = node_cost(next(n for n in call_nodes(make_fx(torch.bmm)(a, b)) if base_name(n.target) == "bmm"))
    assert static.flops == 2 * 3 * 5 * 7 * 11 and not static.flops.free_symbols
    assert cost.evaluate(SizeHints.from_graph(gm)) == static.evaluate()


def test_model_bmm_is_symbolic_in_batch() -> None:
    (gm,) = joint_graphs("gpt_block", True)
    hints = SizeHints.from_graph(gm)
    bmms = [n for n in call_nodes(gm) if base_name(n.target) == "bmm"]
    assert len(bmms) == 6
    for node in bmms:
        (bs, m, k), (_, _, n) = (shape_of(arg.meta["val"]) for arg in node.args)
        cost = node_cost(node)
        assert sympy.simplify(cost.flops - 2 * bs * m * n * k) == 0
        assert cost.flops.free_symbols
        assert cost.evaluate(hints).flops == 2 * hints.evaluate(bs * m * n * k)


def _totals(gm: torch.fx.GraphModule) -> dict[OpKind, tuple[int, int]]:
    hints = SizeHints.from_graph(gm)
    totals: dict[OpKind, list[int]] = collections.defaultdict(lambda: [0, 0])
    for node in call_nodes(gm):
        cost = node_cost(node).evaluate(hints)
        totals[cost.kind][0] += cost.flops
        totals[cost.kind][1] += cost.total_bytes
    return {k: tuple(v) for k, v in totals.items()}  # type: ignore[misc]


@pytest.mark.parametrize("model", MODELS)
def test_dynamic_costs_evaluate_to_static_counts(model: str) -> None:
    (static,), (dynamic,) = joint_graphs(model, False), joint_graphs(model, True)
    s, d = _totals(static), _totals(dynamic)
    for kind in (OpKind.GEMM, OpKind.CONV, OpKind.ATTENTION):
        assert s.get(kind) == d.get(kind), kind
    assert s.get(OpKind.GEMM, (0, 0))[0] + s.get(OpKind.CONV, (0, 0))[0] > 0


@pytest.mark.parametrize("model", MODELS)
def test_costing_adds_no_guards(model: str) -> None:
    (gm,) = joint_graphs(model, True)
    shape_env = _shape_env(gm)
    guards_before = len(shape_env.guards)
    replacements_before = dict(shape_env.replacements)
    hints = SizeHints.from_graph(gm)
    symbolic = 0
    for node in gm.graph.nodes:
        cost = node_cost(node)
        symbolic += bool(cost.free_symbols)
        cost.evaluate(hints)
        estimate_runtime(cost, PROFILES["h100"], hints)
    assert symbolic > 0
    assert len(shape_env.guards) == guards_before
    assert dict(shape_env.replacements) == replacements_before


def test_size_hints_from_graph() -> None:
    (gm,) = joint_graphs("mlp", True)
    hints = SizeHints.from_graph(gm)
    placeholders = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    batch = next(
        s for v in placeholders if isinstance(v, torch.Tensor) for s in shape_of(v) if s.free_symbols
    )
    assert isinstance(batch, sympy.Symbol) and hints.hint(batch) == 4
    assert hints.evaluate(3 * batch + 1) == 13
    (static,) = joint_graphs("mlp", False)
    assert SizeHints.from_graph(static).evaluate(sympy.Integer(7)) == 7
    assert SizeHints.from_graph(torch.fx.Graph()).values == {}


def test_size_hints_validation_and_unknown_symbols() -> None:
    x = sympy.Symbol("u7", integer=True)
    assert SizeHints(unbacked_hint=10).evaluate(2 * x) == 20
    assert SizeHints({x: 3}).evaluate(x**2) == 9
    with pytest.raises(ValueError, match="unbacked_hint"):
        SizeHints(unbacked_hint=-1)


def test_runtime_needs_hints_for_symbolic_costs() -> None:
    (gm,) = joint_graphs("mlp", True)
    node = next(n for n in call_nodes(gm) if base_name(n.target) == "addmm")
    with pytest.raises(ValueError, match="shape symbols"):
        estimate_runtime(node_cost(node), "h100")
    assert estimate_runtime(node_cost(node), "h100", SizeHints.from_graph(gm)) > 0


def test_guard_counter_would_see_a_guard() -> None:
    """Control for test_costing_adds_no_guards: a comparison on a SymInt is seen there."""
    gm = make_fx(torch.bmm, tracing_mode="symbolic")(torch.randn(3, 5, 7), torch.randn(3, 7, 11))
    shape_env = _shape_env(gm)
    node = next(n for n in call_nodes(gm) if base_name(n.target) == "bmm")
    before = len(shape_env.guards)
    node_cost(node).evaluate(SizeHints.from_graph(gm))
    assert len(shape_env.guards) == before
    assert node.meta["val"].shape[1] != 6  # a guard
    assert len(shape_env.guards) > before
