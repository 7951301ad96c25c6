"""State and aliasing: what a training step changes besides gradients, at every budget.

Each model runs two steps eagerly and compiled (fast path) at budgets 1, 0.5 and 0; the
outputs, gradients, parameters and buffers after each step, and the inputs afterwards must
all equal eager's. A value recomputed in backward must never repeat a side effect.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from recompute_pass import recompute_eager_backend
from recompute_pass import torch_internals as ti
from recompute_pass.step.planner import MAX_WAITS
from tests.support.stress import Run, assert_same_run, assert_valid, run_steps, spy_partitions

BUDGETS = [1.0, 0.5, 0.0]


class BatchNormNet(nn.Module):
    """BatchNorm in training mode: running statistics are a forward side effect."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.bn2 = nn.BatchNorm1d(16)
        self.fc = nn.Linear(8 * 8 * 8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.conv(x))).flatten(1)
        return F.gelu(self.bn2(self.fc(h))).square().mean()


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        h.add_(1.0)
        h = h.relu()
        g = h.clone()
        g.mul_(2.0)
        g[:, :4] = 0.5
        g.sigmoid_()
        return self.b(g * h).sum()


class MutatesInput(nn.Module):
    """Adds to a buffer-like input in forward: the mutation must happen once per step."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
        counter.add_(1.0)
        x.mul_(0.5)
        return (self.a(x) * counter).tanh().sum()


class StepCounter(nn.Module):
    """A buffer updated before the forward reads it (a step counter). Recomputed in
    backward, the read would see the buffer after the update (pytorch/pytorch#197039)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.register_buffer("step", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.step.add_(1.0)
        return (torch.sin(self.a(x) * (self.step * 0.7)) * self.step).square().mean()


class Views(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p, q = self.a(x).chunk(2, -1)
        z = (p.sigmoid() * q).view(2, -1).t().contiguous()
        w = z.unsqueeze(0).expand(3, -1, -1)
        return (w * z).transpose(-1, -2).reshape(-1)[::3].sum() + z.diagonal().exp().sum()


class DetachNoGrad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x).relu()
        with torch.no_grad():
            scale = h.abs().mean() + self.b(x).sigmoid()
        return (self.b(h) * scale + h.detach().exp()).sin().sum()


class PartlyFrozen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)
        self.c = nn.Linear(16, 16)
        self.a.requires_grad_(False)
        self.c.bias.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.relu(self.b(F.gelu(self.a(x))))).square().mean()


class SeveralOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.a(x).relu()
        return self.b(h), h.sum(-1), h.detach(), h.argmax(-1)


def _several_outputs_loss(out: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return out[0].square().sum() + (out[1] * out[2].sum(-1)).sum()


class GraphBreak(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.a(x))
        torch._dynamo.graph_break()
        return self.b(h).tanh().square().mean()


class Checkpointed(nn.Module):
    """``torch.utils.checkpoint`` regions, optionally with dropout or a save policy inside."""

    def __init__(
        self, dropout: float = 0.0, policy: Callable[..., Any] | None = None, enabled: bool = True
    ) -> None:
        super().__init__()
        self.enabled = enabled
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 16)
        self.c = nn.Linear(16, 16)
        self.dropout = dropout
        self.policy = policy

    def block(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.dropout(F.gelu(self.a(x)), self.dropout, training=self.dropout > 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        context: dict[str, Any] = {}
        if self.policy is not None:
            context["context_fn"] = functools.partial(create_selective_checkpoint_contexts, self.policy)
        h = checkpoint(self.block, x, use_reentrant=False, **context) if self.enabled else self.block(x)
        return self.c(h.sin()).square().mean()


def _save_matmuls(ctx: object, op: object, *args: object, **kwargs: object) -> CheckpointPolicy:
    """torchtitan-style selective checkpointing: save matmul outputs, recompute the rest."""
    if op in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def _x() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(4, 16)


CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[], list[torch.Tensor]], Any]] = {
    "batchnorm": (BatchNormNet, lambda: [torch.randn(4, 3, 8, 8)], None),
    "in_place": (InPlace, lambda: [_x()], None),
    "mutates_input": (MutatesInput, lambda: [_x(), torch.zeros(4, 16)], None),
    "step_counter": (StepCounter, lambda: [_x()], None),
    "views": (Views, lambda: [_x()], None),
    "detach_no_grad": (DetachNoGrad, lambda: [_x()], None),
    "partly_frozen": (PartlyFrozen, lambda: [_x()], None),
    "several_outputs": (SeveralOutputs, lambda: [_x()], _several_outputs_loss),
    "graph_break": (GraphBreak, lambda: [_x()], None),
    "checkpoint": (Checkpointed, lambda: [_x()], None),
    "checkpoint_disabled": (functools.partial(Checkpointed, enabled=False), lambda: [_x()], None),
    "checkpoint_dropout": (functools.partial(Checkpointed, dropout=0.3), lambda: [_x()], None),
    "checkpoint_policy": (functools.partial(Checkpointed, policy=_save_matmuls), lambda: [_x()], None),
}
GRAPHS = {"graph_break": 2}  # compiled graphs per step where not 1
# Steps run where not 2. The graph after the break runs a provisional plan until a
# recorded step plans it, and a step that begins with gradients (they accumulate here)
# is recorded again, up to the planner's MAX_WAITS steps: then it is planned, and the
# step after that runs its final plan.
STEPS = {"graph_break": MAX_WAITS + 2}


pytestmark = pytest.mark.usefixtures("fallback_random")  # conftest: compiled dropout draws eager's masks


def _build(name: str) -> tuple[nn.Module, list[torch.Tensor], Any]:
    make_model, make_inputs, loss = CASES[name]
    torch.manual_seed(0)
    model = make_model()
    torch.manual_seed(1)
    return model, make_inputs(), loss


@functools.cache
def _eager(name: str) -> Run:
    model, inputs, loss = _build(name)
    with ti.inductor_config.patch(fallback_random=True):
        return run_steps(model, inputs, steps=STEPS.get(name, 2), loss=loss)


@functools.cache
def _ours(name: str, budget: float, mode: str = "peak") -> tuple[Run, tuple[Any, ...]]:
    model, inputs, loss = _build(name)
    backend = recompute_eager_backend.with_options(memory_budget=budget, budget_mode=mode, fallback=False)
    with spy_partitions() as spy:
        run = run_steps(model, inputs, backend=backend, steps=STEPS.get(name, 2), loss=loss)
    return run, tuple(spy.calls)


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_step_equals_eager(name: str, budget: float) -> None:
    run, calls = _ours(name, budget)
    assert_same_run(run, _eager(name))
    graphs = GRAPHS.get(name, 1)
    assert len(calls) == graphs and len(run.reports) == graphs  # partitioned once, reused in step 2
    for call, report in zip(calls, run.reports, strict=True):
        assert_valid(call)
        assert report.fallback is None and report.within_budget


@pytest.mark.parametrize("budget", BUDGETS)
def test_batchnorm_statistics_update_once_per_step(budget: float) -> None:
    run, _ = _ours("batchnorm", budget)
    eager = _eager("batchnorm")
    for step, (state, expected) in enumerate(zip(run.states, eager.states, strict=True), start=1):
        for bn in ("bn1", "bn2"):
            assert state[f"{bn}.num_batches_tracked"].item() == step
            torch.testing.assert_close(state[f"{bn}.running_mean"], expected[f"{bn}.running_mean"])
            torch.testing.assert_close(state[f"{bn}.running_var"], expected[f"{bn}.running_var"])
        # Not vacuous: the statistics moved, differently after each step.
        assert not torch.equal(state["bn1.running_mean"], torch.zeros(8))
    assert not torch.equal(run.states[0]["bn2.running_var"], run.states[1]["bn2.running_var"])
    if budget == 0.0:  # the normalisation is recomputed, its running-stat update is not repeated
        (report,) = run.reports
        assert report.recomputed


def test_input_mutation_applied_once_per_step() -> None:
    for budget in BUDGETS:
        run, _ = _ours("mutates_input", budget)
        x, counter = run.inputs
        torch.testing.assert_close(counter, torch.full((4, 16), 2.0))
        torch.testing.assert_close(x, _build("mutates_input")[1][0] * 0.25)


def _saved_ops(run: Run) -> list[str]:
    (report,) = run.reports
    return [v.op for v in report.saved]


def test_frozen_parameters_get_no_gradient() -> None:
    run, _ = _ours("partly_frozen", 0.0)
    assert set(run.grads) == {"b.weight", "b.bias", "c.weight"}


def test_checkpoint_policies_are_honoured() -> None:
    """PREFER_RECOMPUTE regions recompute even at budget 1; MUST_SAVE values are saved at 0."""

    def ops(name: str, budget: float, field: str) -> list[str]:
        # Saved-bytes budgets: 0 recomputes what it may (a low peak may save a cheaper value).
        (report,) = _ours(name, budget, "saved")[0].reports
        return [v.op for v in getattr(report, field) if not getattr(v, "static", False)]

    # At budget 1 the cost model alone saves every GEMM output; the region's is recomputed.
    assert "addmm" not in ops("checkpoint_disabled", 1.0, "recomputed")
    assert "addmm" in ops("checkpoint", 1.0, "recomputed")
    assert ops("checkpoint_policy", 0.0, "saved").count("addmm") == 2
    # Dropout inside a region: nothing of the region is saved, at any budget; the draw is
    # replayed from its saved generator state (as PyTorch does), never drawn afresh.
    for budget in BUDGETS:
        assert "native_dropout" in ops("checkpoint_dropout", budget, "recomputed")
        assert ops("checkpoint_dropout", budget, "saved").count("rng_state") == 1
        assert "getitem" not in ops("checkpoint_dropout", budget, "saved")
    assert ops("checkpoint_dropout", 0.0, "recomputed").count("addmm") >= 2


class AliasingOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.a(x).tanh()
        return y.sum(), x.view(-1), x[:2], y.t(), y


@pytest.mark.parametrize("budget", BUDGETS)
def test_outputs_aliasing_inputs_and_each_other(budget: float) -> None:
    torch.manual_seed(0)
    model = AliasingOutputs()
    eager_model = copy.deepcopy(model)
    x = _x()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=recompute_eager_backend.with_options(memory_budget=budget))
    out = compiled(x)
    expected = eager_model(x)
    torch.testing.assert_close(out, expected)
    storage = x.untyped_storage().data_ptr()
    assert out[1].untyped_storage().data_ptr() == storage and out[2].untyped_storage().data_ptr() == storage
    assert out[3].untyped_storage().data_ptr() == out[4].untyped_storage().data_ptr()
    (out[0] + out[3].sum()).backward()
    (expected[0] + expected[3].sum()).backward()
    torch.testing.assert_close(dict(model.named_parameters()), dict(eager_model.named_parameters()))
    torch.testing.assert_close(
        {n: p.grad for n, p in model.named_parameters()},
        {n: p.grad for n, p in eager_model.named_parameters()},
    )
    x.add_(1.0)  # after backward: the returned views follow the input, as in eager
    torch.testing.assert_close(out[1], x.view(-1))
    torch.testing.assert_close(out[2], x[:2])
