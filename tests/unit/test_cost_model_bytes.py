"""Bytes read/written per node, and op classification."""

from __future__ import annotations

import operator

import pytest
import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from cost_model import OpKind, SizeHints, node_cost, tensor_bytes
from cost_model.kinds import base_name
from tests.support.cost_model_graphs import call_nodes, joint_graphs

ITEMSIZE = {torch.float32: 4, torch.bfloat16: 2, torch.float16: 2, torch.int64: 8, torch.bool: 1}


def _nodes(fn, *inputs: torch.Tensor, mode: str = "fake") -> dict[str, torch.fx.Node]:
    gm = make_fx(fn, tracing_mode=mode)(*inputs)
    return {base_name(n.target): n for n in call_nodes(gm)}


@pytest.mark.parametrize("dtype", list(ITEMSIZE), ids=str)
def test_bytes_exact_per_dtype(dtype: torch.dtype) -> None:
    x = torch.randn(6, 7)
    cast = _nodes(lambda x: x.to(dtype, copy=True), x)["_to_copy"]
    cost = node_cost(cast)
    assert cost.bytes_in == 6 * 7 * 4
    assert cost.bytes_out == 6 * 7 * ITEMSIZE[dtype]
    assert cost.dtype == dtype

    y = torch.zeros(6, 7, dtype=dtype)
    op = "eq" if dtype == torch.bool else "add"
    node = _nodes((lambda y: y == y) if dtype == torch.bool else (lambda y: y + y), y)[op]
    cost = node_cost(node)
    assert cost.bytes_in == 6 * 7 * ITEMSIZE[dtype]  # `y` is read once, not twice
    assert cost.bytes_out == 6 * 7 * ITEMSIZE[dtype]
    assert cost.flops == 42 and cost.kind is OpKind.POINTWISE


def test_non_contiguous_outputs() -> None:
    x = torch.randn(3, 5, 7)
    permuted = _nodes(lambda x: x.permute(2, 0, 1) * 2, x)["mul"]
    assert not permuted.meta["val"].is_contiguous()
    assert node_cost(permuted).bytes_out == 3 * 5 * 7 * 4

    conv_in = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    conv = _nodes(lambda x, w: torch.conv2d(x, w), conv_in, torch.randn(4, 3, 3, 3))["convolution"]
    assert conv.meta["val"].is_contiguous(memory_format=torch.channels_last)
    assert not conv.meta["val"].is_contiguous()
    assert node_cost(conv).bytes_out == 2 * 4 * 6 * 6 * 4


def test_tensor_bytes_is_the_storage_span() -> None:
    vals = {
        name: node.meta["val"]
        for name, node in _nodes(
            lambda x: (
                torch.empty_strided((4, 3), (1, 8)),  # gaps: 1 + 3*1 + 2*8 = 20 elements
                x.expand(5, 4, 3),  # stride 0 on dim 0: the storage of x
                x.t(),
                x[:, ::2],  # 1 + 3*3 + 1*2 = 12 elements
            ),
            torch.randn(4, 3),
        ).items()
    }
    assert tensor_bytes(vals["empty_strided"]) == 20 * 4
    assert tensor_bytes(vals["expand"]) == 12 * 4
    assert tensor_bytes(vals["t"]) == 12 * 4
    assert tensor_bytes(vals["slice"]) == (1 + 3 * 3 + 1 * 2) * 4
    assert tensor_bytes((vals["t"], None, 3, [vals["expand"]])) == 24 * 4
    assert tensor_bytes(None) == 0 and tensor_bytes(7) == 0
    assert tensor_bytes(torch.empty(0, 5)) == 0
    assert tensor_bytes(torch.empty(2, 3, dtype=torch.float16)) == 12


def test_symbolic_span() -> None:
    nodes = _nodes(lambda x: (x.expand(3, *x.shape), x.t().contiguous()), torch.randn(5, 7), mode="symbolic")
    expand_val = nodes["expand"].meta["val"]
    rows, cols = (s.node.expr for s in expand_val.shape[1:])
    assert sympy.simplify(tensor_bytes(expand_val) - 4 * rows * cols) == 0
    clone = node_cost(nodes["clone"])
    assert sympy.simplify(clone.bytes_out - 4 * rows * cols) == 0
    assert sympy.simplify(clone.bytes_in - 4 * rows * cols) == 0
    assert clone.evaluate(SizeHints.from_graph(nodes["clone"].graph)).bytes_out == 140


def test_views_cost_nothing() -> None:
    def f(x):
        y = x.view(4, 6).t()
        a, b, _ = y.split(2)
        return y.expand(2, 6, 4), y[1], y.unsqueeze(0), a.detach(), b.permute(1, 0), x.reshape(24)

    gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 12))
    names = set()
    for node in call_nodes(gm):
        cost = node_cost(node)
        names.add(base_name(node.target))
        assert cost.kind is OpKind.VIEW, node.target
        assert cost.flops == cost.bytes_in == cost.bytes_out == cost.effective_flops == 0
        assert cost.known
    assert {"view", "t", "split", "expand", "select", "unsqueeze", "detach", "permute"} <= names

    (gm,) = joint_graphs("cnn", False)
    getitems = [n for n in call_nodes(gm) if n.target is operator.getitem]
    assert getitems and all(
        node_cost(n).kind is OpKind.VIEW and node_cost(n).bytes_out == 0 for n in getitems
    )


def test_multi_output_and_gathers() -> None:
    x = torch.randn(8, 16)
    var_mean = _nodes(lambda x: torch.var_mean(x, dim=1), x)["var_mean"]
    cost = node_cost(var_mean)
    assert cost.kind is OpKind.REDUCTION and cost.flops == 128
    assert cost.bytes_in == 8 * 16 * 4 and cost.bytes_out == 2 * 8 * 4

    weight, idx = torch.randn(1000, 16), torch.zeros(3, 5, dtype=torch.int64)
    emb = node_cost(_nodes(lambda i, w: torch.nn.functional.embedding(i, w), idx, weight)["embedding"])
    assert emb.kind is OpKind.DATA_MOVEMENT and emb.flops == 0
    assert emb.bytes_in == 3 * 5 * 8 + 3 * 5 * 16 * 4  # indices + gathered rows, not the table
    assert emb.bytes_out == 3 * 5 * 16 * 4

    cat = node_cost(_nodes(lambda a, b: torch.cat([a, b, a]), x, x[:2].clone())["cat"])
    assert cat.kind is OpKind.DATA_MOVEMENT
    assert cat.bytes_in == (8 + 2) * 16 * 4 and cat.bytes_out == 18 * 16 * 4

    empty = node_cost(_nodes(lambda x: torch.empty_like(x), x)["empty_like"])
    assert empty.bytes_out == empty.bytes_in == empty.flops == 0  # allocates, reads and writes nothing


@pytest.mark.parametrize(
    ("fn", "op", "kind"),
    [
        (lambda x: x.relu(), "relu", OpKind.POINTWISE),
        (lambda x: x.clone(), "clone", OpKind.POINTWISE),
        (lambda x: torch.where(x > 0, x, 0.0), "where", OpKind.POINTWISE),
        (lambda x: x.to(torch.float16), "_to_copy", OpKind.POINTWISE),
        (lambda x: x.sum(), "sum", OpKind.REDUCTION),
        (lambda x: torch.nn.functional.layer_norm(x, (4,)), "native_layer_norm", OpKind.REDUCTION),
        (lambda x: torch.log_softmax(x, -1), "_log_softmax", OpKind.REDUCTION),
        (lambda x: x @ x.t(), "mm", OpKind.GEMM),
        (lambda x: torch.ops.aten.native_dropout(x, 0.5, True), "native_dropout", OpKind.RANDOM),
        (lambda x: torch.empty_like(x).bernoulli_(0.5), "bernoulli_", OpKind.RANDOM),
        (lambda x: torch.cat([x, x]), "cat", OpKind.DATA_MOVEMENT),
        (lambda x: torch.constant_pad_nd(x, [1, 1]), "constant_pad_nd", OpKind.DATA_MOVEMENT),
        (lambda x: x.new_zeros(3).copy_(x[0, :3]), "copy_", OpKind.DATA_MOVEMENT),
        (lambda x: x.view(-1), "view", OpKind.VIEW),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_classification(fn, op: str, kind: OpKind) -> None:
    nodes = _nodes(fn, torch.randn(3, 4))
    assert op in nodes, list(nodes)
    cost = node_cost(nodes[op])
    assert cost.kind is kind
    assert cost.is_random == (kind is OpKind.RANDOM)
    assert cost.known


def test_inductor_random_ops_are_random_kind() -> None:
    import torch._inductor.inductor_prims

    from cost_model.kinds import classify_target, draws_fresh_randomness

    prims = torch.ops.prims
    assert classify_target(prims.inductor_seeds.default) is OpKind.RANDOM
    assert classify_target(prims.inductor_random.default) is OpKind.RANDOM
    assert classify_target(prims.inductor_randint.default) is OpKind.RANDOM
    assert draws_fresh_randomness(prims.inductor_seeds.default)
    assert not draws_fresh_randomness(prims.inductor_random.default)  # a function of its seed
    assert not draws_fresh_randomness(prims.inductor_randint.default)
    assert classify_target(torch.ops.aten.rand.default) is OpKind.RANDOM
    assert draws_fresh_randomness(torch.ops.aten.rand.default)


def test_dropout_in_joint_graph_is_random() -> None:
    (gm,) = joint_graphs("gpt_block", False)
    random = [node_cost(n) for n in call_nodes(gm) if node_cost(n).kind is OpKind.RANDOM]
    assert len(random) == 3 and all(c.is_random and c.flops > 0 for c in random)
    (gm,) = joint_graphs("llama_block", False)
    attention = [node_cost(n) for n in call_nodes(gm) if node_cost(n).kind is OpKind.ATTENTION]
    assert len(attention) == 2 and not any(c.is_random for c in attention)  # dropout_p = 0
