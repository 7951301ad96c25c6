"""Dynamic shapes: symbolic sizes through the whole partitioner, new sizes, unbacked SymInts.

Documented behaviour on a call with new sizes:
- ``dynamic=True``: the graph is partitioned once, at its size hints (the first call's
  sizes), and the plan is *reused* for every later size: saved values are symbolic, so
  what is saved scales with the sizes (for a batch-linear model, exactly with the batch).
- ``dynamic=None`` (the default, automatic dynamic): the first call is static; the first
  new size recompiles with symbolic sizes and is *re-solved* once; later sizes reuse that.
- ``dynamic=False``: each new size recompiles and is re-solved for its own sizes.
"""

from __future__ import annotations

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness.meters import saved_activation_bytes
from benchmarks.harness.models import model_cases
from cost_model import SizeHints, tensor_bytes
from recompute_pass import capture_reports, recompute_eager_backend
from recompute_pass.graph.costing import build_problem, resolve_device
from recompute_pass.graph.joint_graph import analyze
from recompute_pass.options import RecomputeOptions
from recompute_pass.partitioner import partition
from tests.support.joint_graphs import capture_joints
from tests.support.stress import assert_same_run, assert_valid, run_steps, spy_partitions

CASES = model_cases(layers=1, dim=32, seq=16)


pytestmark = pytest.mark.usefixtures("fallback_random")  # conftest: compiled dropout draws eager's masks


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return CASES["mlp"].build()


def _batch(n: int) -> torch.Tensor:
    torch.manual_seed(n)
    return torch.randn(n, 32)


def test_costs_are_symbolic_and_scale_with_the_batch() -> None:
    (joint,) = capture_joints(_mlp(), [_batch(4)], dynamic=True)
    graph = analyze(
        joint.copy(),
        num_fwd_outputs=joint.num_fwd_outputs,
        static_lifetime_input_indices=joint.static_lifetime_input_indices,
    )
    hints = SizeHints.from_graph(graph.module)
    (batch,) = (s for s, v in hints.values.items() if v == 4)
    doubled = SizeHints({**hints.values, batch: 8})
    activations = [  # the MLP's [batch, features] activations
        c
        for c in graph.candidates
        if c.can_save and not c.static and isinstance(v := c.node.meta["val"], torch.Tensor) and v.dim() == 2
    ]
    assert len(activations) >= 4
    for candidate in activations:  # the byte count the budget is charged with, symbolic
        size = tensor_bytes(candidate.node.meta["val"])
        assert batch in size.free_symbols, candidate.node.name
        assert doubled.evaluate(size) == 2 * hints.evaluate(size)
    # The problem is stated at the hints: the same numbers a static trace at batch 4 gives.
    (static,) = capture_joints(_mlp(), [_batch(4)], dynamic=False)
    sizes = []
    for captured in (joint, static):
        view = analyze(
            captured.copy(),
            num_fwd_outputs=captured.num_fwd_outputs,
            static_lifetime_input_indices=captured.static_lifetime_input_indices,
        )
        problem = build_problem(view, resolve_device("cpu", view)).problem
        sizes.append(sorted(item.size for item in problem.items if item.size))
    assert sizes[0] == sizes[1]


@pytest.mark.parametrize("name", ["mlp", "gpt_block", "llama_block", "cnn"])
def test_partitioning_adds_no_guards(name: str) -> None:
    """Reading sizes with hints only: the partitioner must not specialise the shapes."""
    case = CASES[name]
    torch.manual_seed(0)
    model = case.build()
    torch.manual_seed(1)
    (joint,) = capture_joints(model, case.inputs(4), dynamic=True)
    module = joint.copy()
    shape_env = next(
        n.meta["val"].fake_mode.shape_env
        for n in module.graph.nodes
        if isinstance(n.meta.get("val"), torch.Tensor)
    )
    guards, replacements = len(shape_env.guards), dict(shape_env.replacements)
    for budget in (1.0, 0.5, 0.0):
        _, _, report = partition(
            joint.copy(),
            num_fwd_outputs=joint.num_fwd_outputs,
            static_lifetime_input_indices=joint.static_lifetime_input_indices,
            options=RecomputeOptions(memory_budget=budget),
        )
        assert report.within_budget
    assert len(shape_env.guards) == guards
    assert dict(shape_env.replacements) == replacements


def _call(fn: object, model: nn.Module, x: torch.Tensor) -> tuple[dict[str, torch.Tensor], int]:
    model.zero_grad()
    loss = fn(x)  # type: ignore[operator]
    saved = saved_activation_bytes(loss, exclude=[*model.parameters(), *model.buffers(), x])
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}, saved


@pytest.mark.parametrize(("dynamic", "partitions"), [(True, 1), (None, 2), (False, 3)])
def test_new_sizes_stay_correct(dynamic: bool | None, partitions: int) -> None:
    model, eager = _mlp(), _mlp()
    torch._dynamo.reset()
    # Saved bytes: what the plan saves scales with the batch, the peak (weights) does not.
    backend = recompute_eager_backend.with_options(memory_budget=0.5, budget_mode="saved")
    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    saved = {}
    with capture_reports() as reports:
        for n in (4, 8, 12):
            grads, saved[n] = _call(compiled, model, _batch(n))
            expected, _ = _call(eager, eager, _batch(n))
            torch.testing.assert_close(grads, expected, rtol=1e-5, atol=1e-6)
    assert len(reports) == partitions
    assert all(r.fallback is None and r.within_budget for r in reports)
    assert saved[4] > 0
    if dynamic:  # one symbolic plan: what it saves scales with the batch
        assert saved[8] == 2 * saved[4] and saved[12] == 3 * saved[4]
    if dynamic is False:  # re-solved at each size: the report is exact at each size
        assert [r.max_bytes for r in reports] == [reports[0].max_bytes * k for k in (1, 2, 3)]


class DataDependent(nn.Module):
    """Sizes known only at run time: ``nonzero``, ``masked_select`` and ``.item()``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        rows = (h.sum(-1) > 0).nonzero().squeeze(-1)
        picked = F.gelu(self.b(h[rows]))
        positive = h.masked_select(h > 0)
        k = int((h > 1).sum().item())
        torch._check(k <= h.shape[1])
        head = h.tanh()[:, :k]
        return picked.square().mean() + positive.exp().mean() + head.sum()


@pytest.mark.parametrize("budget", [1.0, 0.5, 0.0])
def test_unbacked_symints_do_not_crash(budget: float) -> None:
    torch.manual_seed(0)
    model = DataDependent()
    torch.manual_seed(1)
    inputs = [torch.randn(8, 16)]
    expected = run_steps(model, inputs, steps=2)
    backend = recompute_eager_backend.with_options(memory_budget=budget, fallback=False)
    with (
        torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True),
        spy_partitions() as spy,
    ):
        run = run_steps(model, inputs, backend=backend, steps=2)
    assert_same_run(run, expected)
    assert spy.calls and len(run.reports) == len(spy.calls)
    for call in spy.calls:
        assert_valid(call)
    # Not vacuous: the partitioned graph has data-dependent (unbacked) sizes.
    unbacked = {
        str(s)
        for call in spy.calls
        for item in call.partition.forward.graph.nodes
        if isinstance(item.meta.get("val"), torch.Tensor)
        for dim in item.meta["val"].shape
        if isinstance(dim, torch.SymInt)
        for s in sympy.sympify(str(dim)).free_symbols
        if str(s).startswith("u")
    }
    assert unbacked
