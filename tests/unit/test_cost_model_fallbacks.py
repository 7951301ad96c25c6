"""Weird nodes get the documented fallback: never an exception, each reason logged once."""

from __future__ import annotations

import importlib
import logging
import operator

import pytest
import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from cost_model import OpKind, SizeHints, node_cost
from cost_model._log import log_once
from cost_model.kinds import base_name
from tests.support.cost_model_graphs import call_nodes, joint_graphs


@pytest.fixture(autouse=True)
def fresh_log_once():
    log_once.cache_clear()
    yield
    log_once.cache_clear()


def _records(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage() and r.name.startswith("cost_model")]


def _mm_graph() -> torch.fx.GraphModule:
    return make_fx(lambda a, b: (a @ b).relu(), tracing_mode="fake")(torch.randn(5, 7), torch.randn(7, 3))


def test_node_without_meta_val(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cost_model")
    gm = _mm_graph()
    mm, relu = call_nodes(gm)
    del mm.meta["val"]
    for _ in range(3):
        cost = node_cost(mm)
        assert cost.kind is OpKind.GEMM and not cost.known
        assert cost.flops == 0 and cost.bytes_out == 0
        assert cost.bytes_in == (5 * 7 + 7 * 3) * 4  # the inputs still have values
        assert cost.dtype == torch.float32
    consumer = node_cost(relu)  # reads an input without a value: counts what it knows
    assert consumer.known and consumer.bytes_in == 0 and consumer.bytes_out == 5 * 3 * 4
    assert len(_records(caplog, "no meta['val']")) == 1


def test_unbacked_symint(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cost_model")

    def f(x, w):
        rows = torch.nonzero(x).float()  # (u0, 2): a data-dependent size
        return (rows @ w).sum()

    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(8, 2), torch.randn(2, 3))
    nodes = {base_name(n.target): n for n in call_nodes(gm)}
    mm = node_cost(nodes["mm"])
    (u0,) = (s for s in mm.flops.free_symbols if str(s).startswith("u"))
    assert not mm.known and mm.kind is OpKind.GEMM
    cols = next(s for s in mm.flops.free_symbols if s != u0)
    assert sympy.simplify(mm.flops - 2 * u0 * 2 * cols) == 0
    assert node_cost(nodes["nonzero"]).bytes_out == 16 * u0  # int64 (u0, 2)

    hints = SizeHints.from_graph(gm)
    assert hints.hint(u0) == 4096
    assert mm.evaluate(hints).flops == 2 * 4096 * 2 * 3
    assert SizeHints.from_graph(gm, unbacked_hint=10).evaluate(mm.flops) == 2 * 10 * 2 * 3
    node_cost(nodes["mm"])
    assert len(_records(caplog, "unbacked SymInt")) >= 1
    assert len([r for r in _records(caplog, "unbacked SymInt") if "mm" in r.getMessage()]) == 1


def test_synthetic_unbacked_meta() -> None:
    gm = make_fx(lambda x: torch.nonzero(x), tracing_mode="symbolic")(torch.randn(4, 4))
    unbacked = next(n for n in call_nodes(gm)).meta["val"]
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = unbacked
    node = graph.call_function(torch.ops.aten.relu.default, (x,))
    node.meta["val"] = unbacked
    cost = node_cost(node)
    assert not cost.known and cost.kind is OpKind.POINTWISE
    assert cost.evaluate(SizeHints(unbacked_hint=5)).flops == 10


@torch.library.custom_op("cost_model_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@mystery.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_unknown_custom_op(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cost_model")
    gm = make_fx(lambda x: mystery(mystery(x)), tracing_mode="fake")(torch.randn(4, 8))
    costs = [node_cost(n) for n in call_nodes(gm)]
    assert len(costs) == 2
    for cost in costs:
        assert cost.op == "cost_model_test.mystery.default"
        assert cost.kind is OpKind.UNKNOWN and not cost.known
        assert cost.flops == 0 and cost.bytes_in == cost.bytes_out == 4 * 8 * 4  # bytes-bound
    records = _records(caplog, "unknown op")
    assert len(records) == 1 and records[0].levelno == logging.WARNING


def test_non_call_nodes_and_sym_ops() -> None:
    (gm,) = joint_graphs("mlp", True)
    sym_nodes = [
        n for n in call_nodes(gm) if not hasattr(n.target, "_schema") and n.target is not operator.getitem
    ]
    assert sym_nodes  # SymInt arithmetic (operator.mul...) in the dynamic graph
    for node in [*sym_nodes, *(n for n in gm.graph.nodes if n.op in ("placeholder", "output"))]:
        cost = node_cost(node)
        assert cost.kind is OpKind.NONE and cost.known
        assert cost.flops == cost.bytes_in == cost.bytes_out == 0

    graph = torch.fx.Graph()
    attr = graph.get_attr("weight")
    assert node_cost(attr).kind is OpKind.NONE
    for fn in (operator.mul, torch.sym_max):  # SymInt arithmetic without a meta value
        cost = node_cost(graph.call_function(fn, (attr, 2)))
        assert cost.kind is OpKind.NONE and cost.known and cost.flops == 0
    hop = graph.call_function(torch.ops.higher_order.cond, (True, None, None, ()))
    hop.meta["val"] = torch.empty(3)
    cost = node_cost(hop)
    assert cost.kind is OpKind.UNKNOWN and not cost.known and cost.bytes_out == 12


def _unequal_symbol_mm(k_a: int, rows_b: int) -> torch.fx.Node:
    """An mm whose inner sizes are structurally different expressions (``s0`` and
    ``(s1 + 1) // 2``), so the registry formula's ``k == k2`` check fails symbolically."""
    traced = make_fx(lambda a, b: (a, b[::2]), tracing_mode="symbolic")(
        torch.randn(5, k_a), torch.randn(rows_b, 3)
    )
    a = next(n for n in traced.graph.nodes if n.op == "placeholder")
    b = next(n for n in call_nodes(traced) if base_name(n.target) == "slice")
    fake_a, fake_b = a.meta["val"], b.meta["val"]
    node = traced.graph.call_function(torch.ops.aten.mm.default, (a, b))
    with fake_a.fake_mode:
        node.meta["val"] = torch.empty(fake_a.shape[0], fake_b.shape[1])
    return node


def test_formula_failure_falls_back_to_hints(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cost_model")
    cost = node_cost(_unequal_symbol_mm(7, 14))
    assert cost.known and not cost.flops.free_symbols
    assert cost.flops == 2 * 5 * 7 * 3  # evaluated at the hints
    assert len(_records(caplog, "symbolic FLOP formula failed")) == 1

    broken = node_cost(_unequal_symbol_mm(7, 12))  # even the hints disagree
    assert not broken.known and broken.flops == 0
    assert broken.bytes_out.free_symbols  # bytes are still known
    assert [r.levelno for r in _records(caplog, "FLOP formula failed: flops 0")] == [logging.WARNING]


def test_internal_error_never_escapes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cost_model")

    def boom(value: object) -> sympy.Expr:
        raise RuntimeError("boom")

    monkeypatch.setattr(importlib.import_module("cost_model.node_cost"), "tensor_bytes", boom)
    mm = call_nodes(_mm_graph())[0]
    cost = node_cost(mm)
    assert cost.kind is OpKind.UNKNOWN and not cost.known and cost.flops == 0
    assert len(_records(caplog, "cost model error")) == 1
