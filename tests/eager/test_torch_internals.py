"""Every private PyTorch name we use still exists and still works.

``recompute_pass/torch_internals/`` and ``cost_model/torch_internals.py`` are each
package's one door to torch internals; after a torch upgrade this file says which name
moved, before any partition test fails for a reason that is hard to read.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from types import ModuleType

import pytest
import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import cost_model.torch_internals as cost_ti
import recompute_pass.torch_internals as pass_ti

aten = torch.ops.aten
# Settings the project reads or patches (a config rejects names it does not know).
CONFIG_SETTINGS = {
    "functorch_config": (
        "activation_memory_budget",
        "cse",
        "enable_autograd_cache",
        "unsafe_allow_optimization_of_collectives",
    ),
    "dynamo_config": ("accumulated_recompile_limit", "recompile_limit"),
    "inductor_config": (
        "benchmark_fusion",
        "compile_threads",
        "custom_partitioner_fn",
        "fallback_random",
        "force_disable_caches",
        "fx_graph_cache",
        "max_autotune",
        "max_autotune_gemm",
        "realize_reads_threshold",
    ),
}
NOT_CALLABLE = {
    (cost_ti, "flop_registry"),
    (pass_ti, "CPP_MAX_KERNEL_GROUP_ARGS"),
    (pass_ti, "COMPILE_PATCHES"),
    (pass_ti, "ON_SCHEDULED"),
    (pass_ti, "SCHEDULER_CONFIG"),
    (pass_ti, "inductor_compile_fx"),
    (pass_ti, "inductor_ir"),
}


def _exported() -> list[tuple[ModuleType, str]]:
    return [(module, name) for module in (pass_ti, cost_ti) for name in module.__all__]


@pytest.mark.parametrize(
    ("module", "name"), _exported(), ids=[f"{m.__name__.split('.')[0]}.{n}" for m, n in _exported()]
)
def test_every_exported_name_resolves(module: ModuleType, name: str) -> None:
    obj = getattr(module, name)
    if name in CONFIG_SETTINGS:
        for setting in CONFIG_SETTINGS[name]:
            assert hasattr(obj, setting), f"{name}.{setting}"
        assert callable(obj.patch)
    elif (module, name) in NOT_CALLABLE:
        assert obj is not None
    else:
        assert callable(obj), name


def test_classes_are_classes() -> None:
    for cls in (pass_ti.CustomPartitionerFn, pass_ti.HigherOrderOperator, cost_ti.ShapeEnv):
        assert isinstance(cls, type)
    assert isinstance(torch.ops.higher_order.cond, pass_ti.HigherOrderOperator)
    assert callable(pass_ti.eager_aot_backend(pass_ti.default_partition))


def test_eager_aot_backend_runs_each_partitioned_graph_through_the_graph_compiler() -> None:
    ran: list[str] = []

    def graph_compiler(gm: torch.fx.GraphModule, phase: str):  # type: ignore[no-untyped-def]
        def run(*args: object) -> object:
            ran.append(phase)
            return gm(*args)

        return run

    x = torch.randn(4, 3, requires_grad=True)
    backend = pass_ti.eager_aot_backend(pass_ti.default_partition, graph_compiler)
    torch._dynamo.reset()
    torch.compile(lambda t: (t.sin() * t).sum(), backend=backend)(x).backward()
    assert ran == ["forward", "backward"]
    torch.testing.assert_close(x.grad, x.detach().sin() + x.detach() * x.detach().cos())


# -- cost_model: each accessor gives what the cost model expects ---------------------------


def test_operator_schemas() -> None:
    assert cost_ti.is_op_overload(aten.mm.default)
    assert not cost_ti.is_op_overload(aten.mm)  # the packet
    assert not cost_ti.is_op_overload(operator.add)
    assert cost_ti.schema_name(aten.mm.default) == "aten::mm"
    assert cost_ti.bind_args(aten.add.Tensor, (1, 2), {}) == {"self": 1, "other": 2, "alpha": 1}
    assert cost_ti.bind_args(aten.add.Tensor, (1,), {"other": 2, "alpha": 3}) == {
        "self": 1,
        "other": 2,
        "alpha": 3,
    }
    assert cost_ti.bind_args(operator.add, (1, 2), {}) == {}


def test_backed_symbols() -> None:
    gm = make_fx(lambda x: x * 2, tracing_mode="symbolic")(torch.randn(3, 4))
    val = next(n for n in gm.graph.nodes if n.op == "placeholder").meta["val"]
    shape_env = cost_ti.shape_env_of(val)
    assert isinstance(shape_env, cost_ti.ShapeEnv)
    assert cost_ti.shape_env_of(val.shape[0]) is shape_env
    rows, cols = (cost_ti.sym_expr(s) for s in val.shape)
    assert isinstance(rows, sympy.Symbol) and isinstance(cols, sympy.Symbol)
    backed = cost_ti.backed_values(shape_env)
    assert isinstance(backed, Mapping) and backed[rows] == 3 and backed[cols] == 4
    assert cost_ti.shape_env_of(torch.randn(2)) is None
    assert cost_ti.shape_env_of(3) is None


def test_unbacked_symbols() -> None:
    gm = make_fx(lambda x: torch.nonzero(x), tracing_mode="symbolic")(torch.randn(4, 4))
    val = next(n for n in gm.graph.nodes if n.op == "call_function").meta["val"]
    shape_env = cost_ti.shape_env_of(val)
    (unbacked,) = cost_ti.free_unbacked_symbols(val)
    assert cost_ti.sym_expr(val.shape[0]) == unbacked
    assert unbacked not in cost_ti.backed_values(shape_env)
    # The readers default to empty tables: check the tables themselves are still there.
    assert hasattr(shape_env, "real_tensor_prop_unbacked_vals") and hasattr(shape_env, "var_to_range")
    assert isinstance(cost_ti.real_tensor_values(shape_env), Mapping)
    lower, upper = cost_ti.symbol_bounds(shape_env, unbacked)
    assert lower == 0 and isinstance(upper, int | sympy.Integer) and upper > 4096
    assert cost_ti.symbol_bounds(shape_env, sympy.Symbol("nowhere")) == (None, None)


def test_flop_formulas() -> None:
    assert aten.mm in cost_ti.flop_registry
    assert aten._scaled_dot_product_flash_attention in cost_ti.flop_registry
    assert cost_ti.mm_flop((2, 3), (3, 4)) == 2 * 2 * 3 * 4
    assert cost_ti.bmm_flop((5, 2, 3), (5, 3, 4)) == 5 * 2 * 2 * 3 * 4
    out = (1, 4, 6, 6)
    assert cost_ti.conv_flop_count((1, 3, 8, 8), (4, 3, 3, 3), out, transposed=False) == 2 * 144 * 27
    q = (2, 4, 16, 8)  # (batch, heads, seq, dim)
    assert cost_ti.sdpa_flop_count(q, q, q) == 4 * 2 * 4 * 16 * 16 * 8
    assert cost_ti.sdpa_backward_flop_count(q, q, q, q) > cost_ti.sdpa_flop_count(q, q, q)
    x = sympy.Symbol("s0", positive=True, integer=True)  # symbolic sizes give expressions
    assert cost_ti.mm_flop((x, 3), (3, 4)) == 24 * x


def test_static_indices_of_flattened_subclasses_are_mapped_onto_primals() -> None:
    """Torch 2.13 hands the partitioner static indices of the inputs before DTensor
    parameters are flattened (local tensor, mesh): map them through the descriptors."""
    graph = torch.fx.Graph()
    plain, part = pass_ti.PlainAOTInput, pass_ti.SubclassGetAttrAOTInput
    descs = [
        plain(0),  # the batch
        part(plain(1), "_local_tensor"),  # a DTensor parameter: static
        part(plain(1), "device_mesh"),
        plain(2),  # a plain parameter: static
    ]
    primals = []
    for i, desc in enumerate(descs):
        node = graph.placeholder(f"primals_{i + 1}")
        node.meta["desc"] = desc
        primals.append(node)
    assert pass_ti.flat_static_input_indices(primals, [1, 2]) == [1, 2, 3]
    for node in primals:  # no subclass: the indices are already per primal
        node.meta["desc"] = plain(int(node.name[-1]) - 1)
    assert pass_ti.flat_static_input_indices(primals, [1, 2]) == [1, 2]


def test_the_autograd_cache_methods_we_watch_take_what_we_read() -> None:
    """``observe_autograd_cache`` wraps ``AOTAutogradCache.try_load`` (reads its args and
    the ``cache_info.cache_key`` it leaves on a miss) and ``_lookup`` (reads its key)."""
    import dataclasses
    import inspect

    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCacheInfo

    try_load = inspect.signature(pass_ti.caches._autograd_cache_try_load)
    assert list(try_load.parameters)[:3] == ["mod", "args", "aot_config"]
    assert next(iter(inspect.signature(pass_ti.caches._autograd_cache_lookup).parameters)) == "key"
    assert "cache_key" in {f.name for f in dataclasses.fields(AOTAutogradCacheInfo)}


def test_the_compile_is_observed_where_it_schedules() -> None:
    """``ON_SCHEDULED`` observers are called from Inductor's ``_update_scheduler`` (torch
    2.13), and the scheduler-only settings are still Inductor settings."""
    assert callable(pass_ti.GraphLowering._update_scheduler)
    for key in pass_ti.SCHEDULER_CONFIG:
        assert hasattr(pass_ti.inductor_config, key), key
