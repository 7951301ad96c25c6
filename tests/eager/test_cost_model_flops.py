"""FLOPs equal FlopCounterMode's count on every covered op (and on what it misses)."""

from __future__ import annotations

import itertools

import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from cost_model import OpKind, SizeHints, node_cost
from cost_model.flops import in_registry
from cost_model.kinds import base_name
from cost_model.torch_internals import flop_registry
from tests.support.cost_model_graphs import (
    MODELS,
    call_nodes,
    counted_flops,
    fake_flops,
    joint_graphs,
    materialize,
    node_inputs,
    real_flops,
)

aten = torch.ops.aten
CPU_FLASH = {
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
}
# What each model's graph must contain, so the per-node comparison cannot pass vacuously.
EXPECTED = {
    "mlp": {"addmm", "mm"},
    "cnn": {"convolution", "convolution_backward", "addmm", "mm"},
    "gpt_block": {"addmm", "bmm", "mm"},
    "llama_block": {"mm", *CPU_FLASH},
}


def _sdpa_reference(node: torch.fx.Node, hints: SizeHints) -> int:
    """The registry's sdpa formula on the CPU flash node's concrete shapes."""
    args, _ = node_inputs(node)
    real = materialize(args, hints)
    if base_name(node.target).endswith("backward"):
        grad_out, q, k, v = real[:4]
        return flop_registry[aten._scaled_dot_product_flash_attention_backward](grad_out, q, k, v)
    q, k, v = real[:3]
    return flop_registry[aten._scaled_dot_product_flash_attention](q, k, v)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("model", MODELS)
def test_model_flops_match_flop_counter(model: str, dynamic: bool) -> None:
    covered: set[str] = set()
    for gm in joint_graphs(model, dynamic):
        hints = SizeHints.from_graph(gm)
        for node in call_nodes(gm):
            cost = node_cost(node)
            ours = cost.evaluate(hints).flops
            name = base_name(node.target)
            if in_registry(node.target):
                assert ours == real_flops(node, hints), node.format_node()
                assert cost.known
                covered.add(name)
            elif name in CPU_FLASH:
                assert real_flops(node, hints) == 0  # what PyTorch's counter misses
                assert ours == _sdpa_reference(node, hints) > 0
                covered.add(name)
            if dynamic and name in EXPECTED[model]:
                assert cost.flops.free_symbols, f"{name} should be symbolic under dynamic=True"
    assert EXPECTED[model] <= covered


def test_cpu_flash_forward_matches_math_path() -> None:
    """Independent check: the math attention path's bmm FLOPs under FlopCounterMode."""
    gm = make_fx(lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu(q, k, v))(
        torch.randn(2, 3, 10, 8), torch.randn(2, 3, 12, 8), torch.randn(2, 3, 12, 8)
    )
    node = next(n for n in call_nodes(gm) if "attention" in str(n.target))
    q, k, v = (torch.randn(2, 3, 10, 8), torch.randn(2, 3, 12, 8), torch.randn(2, 3, 12, 8))
    math = counted_flops(aten._scaled_dot_product_attention_math, q, k, v)
    assert node_cost(node).evaluate().flops == math == 2 * (2 * 2 * 3 * 10 * 12 * 8)


def _single(fn, *inputs: torch.Tensor, mode: str = "fake", match: str | None = None) -> torch.fx.Node:
    gm = make_fx(fn, tracing_mode=mode)(*inputs)
    nodes = [n for n in call_nodes(gm) if match is None or base_name(n.target) == match]
    assert nodes, gm.graph
    return nodes[-1]


@pytest.mark.parametrize(
    ("fn", "shapes"),
    [
        (torch.mm, [(5, 7), (7, 3)]),
        (torch.bmm, [(2, 5, 7), (2, 7, 3)]),
        (lambda c, a, b: torch.addmm(c, a, b), [(3,), (5, 7), (7, 3)]),
        (lambda c, a, b: torch.baddbmm(c, a, b, alpha=2.0), [(2, 5, 3), (2, 5, 7), (2, 7, 3)]),
    ],
    ids=["mm", "bmm", "addmm", "baddbmm"],
)
def test_gemm_ops(fn, shapes: list[tuple[int, ...]]) -> None:
    inputs = [torch.randn(s) for s in shapes]
    node = _single(fn, *inputs)
    cost = node_cost(node)
    assert cost.kind is OpKind.GEMM
    assert cost.evaluate().flops == counted_flops(fn, *inputs) > 0


@settings(max_examples=25, deadline=None)
@given(
    b=st.integers(1, 4),
    m=st.integers(1, 9),
    k=st.integers(1, 9),
    n=st.integers(1, 9),
    op=st.sampled_from(["mm", "addmm", "bmm", "baddbmm"]),
)
def test_gemm_formulas_random_shapes(b: int, m: int, k: int, n: int, op: str) -> None:
    fns = {
        "mm": (torch.mm, [(m, k), (k, n)]),
        "addmm": (torch.addmm, [(n,), (m, k), (k, n)]),
        "bmm": (torch.bmm, [(b, m, k), (b, k, n)]),
        "baddbmm": (torch.baddbmm, [(b, m, n), (b, m, k), (b, k, n)]),
    }
    fn, shapes = fns[op]
    inputs = [torch.randn(s) for s in shapes]
    assert node_cost(_single(fn, *inputs)).evaluate().flops == counted_flops(fn, *inputs)


@pytest.mark.parametrize("mask", list(itertools.product([False, True], repeat=3)), ids=str)
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "conv_transpose"])
def test_convolution_backward_per_output_mask(mask: tuple[bool, bool, bool], transposed: bool) -> None:
    x = torch.randn(2, 4, 9, 9)
    w = torch.randn(4, 6, 3, 3) if transposed else torch.randn(6, 4, 3, 3)
    out_channels = 6
    out_size = 11 if transposed else 7
    grad = torch.randn(2, out_channels, out_size, out_size)
    args = ([6] if mask[2] else None, [1, 1], [0, 0], [1, 1], transposed, [0, 0], 1, list(mask))

    def f(g, x, w):
        return aten.convolution_backward(g, x, w, *args)

    node = _single(f, grad, x, w, match="convolution_backward")
    cost = node_cost(node)
    expected = counted_flops(f, grad, x, w)
    assert cost.kind is OpKind.CONV
    assert cost.evaluate().flops == expected
    assert (expected > 0) == (mask[0] or mask[1])  # the bias gradient is a reduction: 0
    if mask == (True, True, False):
        only_input = counted_flops(aten.convolution_backward, grad, x, w, *args[:-1], [True, False, False])
        only_weight = counted_flops(aten.convolution_backward, grad, x, w, *args[:-1], [False, True, False])
        assert expected == only_input + only_weight


def _attention_fns():
    a = aten

    def flash(q, k, v, go, causal):
        o = a._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)
        return a._scaled_dot_product_flash_attention_backward(
            go, q, k, v, o[0], o[1], o[2], o[3], o[4], o[5], 0.0, causal, o[6], o[7]
        )

    def efficient(q, k, v, go, causal):
        o = a._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal)
        return a._scaled_dot_product_efficient_attention_backward(
            go, q, k, v, None, o[0], o[1], o[2], o[3], 0.0, [True, True, True, False], causal
        )

    def cudnn(q, k, v, go, causal):
        o = a._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal)
        return a._scaled_dot_product_cudnn_attention_backward(
            go, q, k, v, o[0], o[1], o[6], o[7], None, o[2], o[3], o[4], o[5], 0.0, causal
        )

    def cpu_flash(q, k, v, go, causal):
        o = a._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
        return a._scaled_dot_product_flash_attention_for_cpu_backward(go, q, k, v, o[0], o[1], 0.0, causal)

    return {"flash": flash, "efficient": efficient, "cudnn": cudnn, "cpu_flash": cpu_flash}


ATTENTION = _attention_fns()
B, H, L, S, D = 2, 4, 16, 24, 8


def _attention_nodes(kind: str, causal: bool, mode: str) -> list[torch.fx.Node]:
    q, go = torch.randn(B, H, L, D), torch.randn(B, H, L, D)
    k, v = torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    gm = make_fx(lambda q, k, v, go: ATTENTION[kind](q, k, v, go, causal), tracing_mode=mode)(q, k, v, go)
    nodes = [n for n in call_nodes(gm) if "attention" in str(n.target)]
    assert len(nodes) == 2
    return nodes


FWD_FLOPS = 2 * (2 * B * H * L * S * D)
BWD_FLOPS = 5 * (2 * B * H * L * S * D)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kind", list(ATTENTION))
def test_attention_kernels(kind: str, causal: bool) -> None:
    """Fused attention kernels (CUDA-only ones traced through their meta kernels)."""
    fwd, bwd = _attention_nodes(kind, causal, "fake")
    kept = L * (L + 1) // 2  # top-left causal mask, L <= S
    for node, total in ((fwd, FWD_FLOPS), (bwd, BWD_FLOPS)):
        cost = node_cost(node).evaluate()
        assert cost.kind is OpKind.ATTENTION and cost.known
        reference = fake_flops(node)
        if kind == "cpu_flash":
            assert reference == 0  # FlopCounterMode misses it; we count the math
        else:
            assert reference == cost.flops
        assert cost.flops == total  # masking never changes `flops` (comparable with PyTorch)
        assert cost.effective_flops == (total * kept // (L * S) if causal else total)
        assert cost.dtype == torch.float32


@pytest.mark.parametrize("kind", ["flash", "efficient"])
def test_attention_kernels_symbolic(kind: str) -> None:
    fwd, bwd = _attention_nodes(kind, True, "symbolic")
    hints = SizeHints.from_graph(fwd.graph)
    for node, total in ((fwd, FWD_FLOPS), (bwd, BWD_FLOPS)):
        cost = node_cost(node)
        assert len(cost.flops.free_symbols) == 5  # b, h, L, S, d
        concrete = cost.evaluate(hints)
        assert concrete.flops == total
        assert concrete.effective_flops == total * (L * (L + 1) // 2) // (L * S)


def _low_level(name: str, heads: int, q_len: int, k_len: int):
    q = torch.randn(B, q_len, heads, D)
    k, v = torch.randn(B, k_len, heads, D), torch.randn(B, k_len, heads, D)
    go = torch.randn(B, q_len, heads, D)

    def flash(q, k, v, go):
        o = aten._flash_attention_forward(q, k, v, None, None, q_len, k_len, 0.0, True, False)
        return aten._flash_attention_backward(
            go, q, k, v, o[0], o[1], None, None, q_len, k_len, 0.0, True, o[2], o[3]
        )

    def efficient(q, k, v, go):
        o = aten._efficient_attention_forward(q, k, v, None, None, None, None, None, 0.0, 1, True)
        return aten._efficient_attention_backward(
            go, q, k, v, None, o[0], None, None, q_len, k_len, o[1], 0.0, o[2], o[3], 1, False
        )

    gm = make_fx({"flash": flash, "efficient": efficient}[name], tracing_mode="fake")(q, k, v, go)
    return [n for n in call_nodes(gm) if "attention" in str(n.target)]


@pytest.mark.parametrize("name", ["flash", "efficient"])
def test_low_level_attention_layout(name: str) -> None:
    """(batch, seq, heads, dim) kernels: equal to FlopCounterMode where its layout reading
    is harmless (heads == seq), and the attention math otherwise."""
    fwd, bwd = _low_level(name, heads=16, q_len=16, k_len=16)
    assert node_cost(fwd).evaluate().flops == fake_flops(fwd) == 2 * (2 * B * 16 * 16 * 16 * D)
    assert node_cost(bwd).evaluate().flops == fake_flops(bwd)
    fwd, bwd = _low_level(name, heads=H, q_len=L, k_len=S)
    with pytest.raises(AssertionError):
        fake_flops(fwd)  # PyTorch reads seq as heads and rejects 16 vs 24 "heads"
    assert node_cost(fwd).evaluate().flops == FWD_FLOPS
    assert node_cost(bwd).evaluate().flops == BWD_FLOPS
    assert node_cost(fwd).evaluate().effective_flops == FWD_FLOPS * (L * (L + 1) // 2) // (L * S)


@pytest.mark.skipif(
    torch.ops.higher_order.flex_attention not in flop_registry, reason="flex_attention has no formula"
)
def test_flex_attention_forward_and_backward() -> None:
    from torch.nn.attention.flex_attention import flex_attention

    graphs: list[torch.fx.GraphModule] = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm

    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.reset()
    q = torch.randn(2, 4, 128, 16)
    torch.compile(flex_attention, backend=aot_autograd(fw_compiler=backend), dynamic=True)(q, q, q)
    node = next(n for n in call_nodes(graphs[0]) if base_name(n.target) == "flex_attention")
    cost = node_cost(node)
    assert cost.kind is OpKind.ATTENTION and cost.known
    assert cost.flops.free_symbols
    args, _ = node_inputs(node)
    expected = flop_registry[node.target](*args, out_val=node.meta["val"])
    assert sympy.simplify(cost.flops - expected) == 0
    assert cost.evaluate(SizeHints.from_graph(graphs[0])).flops == 4 * 2 * 4 * 128 * 128 * 16

    # Backward does not run on CPU: a synthetic node with fake values, and block sparsity.
    node.meta["custom"] = {"sparsity_hint": 0.25}
    sparse = node_cost(node)
    assert sparse.flops == cost.flops
    assert sympy.simplify(sparse.effective_flops - cost.flops * sympy.Rational(3, 4)) == 0

    fake_q = args[0]
    graph = torch.fx.Graph()
    names = ("query", "key", "value", "out", "logsumexp", "grad_out")
    vals = (fake_q, fake_q, fake_q, fake_q, node.meta["val"][1], fake_q)
    inputs = []
    for name, val in zip(names, vals, strict=True):
        ph = graph.placeholder(name)
        ph.meta["val"] = val
        inputs.append(ph)
    bwd = graph.call_function(
        torch.ops.higher_order.flex_attention_backward, (*inputs, None, None, None, None)
    )
    bwd.meta["val"] = (fake_q, fake_q, fake_q, ())
    expected_bwd = flop_registry[torch.ops.higher_order.flex_attention_backward](*vals, None, None, None)
    bwd_cost = node_cost(bwd)
    assert bwd_cost.kind is OpKind.ATTENTION and bwd_cost.known
    assert sympy.simplify(bwd_cost.flops - expected_bwd) == 0
    assert bwd_cost.evaluate(SizeHints.from_graph(graphs[0])).flops == 10 * 2 * 4 * 128 * 128 * 16


def test_causal_discount_only_in_effective_flops() -> None:
    full = _attention_nodes("cpu_flash", False, "fake")[0]
    causal = _attention_nodes("cpu_flash", True, "fake")[0]
    a, b = node_cost(full).evaluate(), node_cost(causal).evaluate()
    assert a.flops == b.flops == a.effective_flops
    assert b.effective_flops < a.effective_flops
    assert b.effective_flops / b.flops == pytest.approx((L + 1) / (2 * S))


def test_pointwise_reduction_random_flops() -> None:
    x = torch.randn(6, 10)

    def f(x):
        y = torch.nn.functional.gelu(x) * 2
        return torch.softmax(y, -1).sum(0), torch.rand_like(x)

    gm = make_fx(f, tracing_mode="fake")(x)
    costs = {base_name(n.target): node_cost(n) for n in call_nodes(gm)}
    assert counted_flops(f, x) == 0  # FlopCounterMode counts no pointwise work
    assert costs["mul"].kind is OpKind.POINTWISE and costs["mul"].flops == 60
    assert costs["_softmax"].kind is OpKind.REDUCTION and costs["_softmax"].flops == 60
    assert costs["sum"].kind is OpKind.REDUCTION and costs["sum"].flops == 60
    assert costs["rand_like"].kind is OpKind.RANDOM and costs["rand_like"].is_random
    assert costs["rand_like"].flops == 60


@pytest.mark.parametrize(
    ("fn", "shapes", "expected"),
    [
        (torch.mv, [(5, 7), (7,)], 2 * 5 * 7),
        (lambda b, m, v: torch.addmv(b, m, v), [(5,), (5, 7), (7,)], 2 * 5 * 7),
        (torch.dot, [(9,), (9,)], 2 * 9),
        (lambda c, a, b: torch.addbmm(c, a, b), [(5, 3), (2, 5, 7), (2, 7, 3)], 2 * 2 * 5 * 7 * 3),
        (lambda c, a, b: aten._addmm_activation(c, a, b), [(3,), (5, 7), (7, 3)], 2 * 5 * 7 * 3),
        (
            lambda x, w: aten.mkldnn_convolution(x, w, None, [1, 1], [1, 1], [1, 1], 1),
            [(2, 3, 8, 8), (4, 3, 3, 3)],
            2 * 2 * 4 * 3 * 8 * 8 * 3 * 3,
        ),
    ],
    ids=["mv", "addmv", "dot", "addbmm", "addmm_activation", "mkldnn_convolution"],
)
def test_gemms_beyond_the_registry(fn, shapes: list[tuple[int, ...]], expected: int) -> None:
    gm = make_fx(fn)(*(torch.randn(s) for s in shapes))  # real mode: mkldnn has no meta kernel
    costs = [node_cost(n) for n in call_nodes(gm)]
    matrix = [c for c in costs if c.kind in (OpKind.GEMM, OpKind.CONV)]
    assert len(matrix) == 1 and matrix[0].known
    assert matrix[0].flops == expected


# -- the shared helpers themselves (tests/support/cost_model_graphs.py) -------------------------


def test_materialize_keeps_layout() -> None:
    gm = joint_graphs("cnn", False)[0]
    hints = SizeHints.from_graph(gm)
    for node in call_nodes(gm):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            real = materialize(val, hints)
            assert tuple(real.shape) == tuple(val.shape)
            assert real.stride() == val.stride()
            assert real.dtype == val.dtype


def test_joint_graphs_have_tangents_and_shapes() -> None:
    for name in MODELS:
        (gm,) = joint_graphs(name, False)
        placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        assert any(p.startswith("primals") for p in placeholders)
        assert any(p.startswith("tangents") for p in placeholders)
