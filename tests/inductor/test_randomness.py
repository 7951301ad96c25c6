"""Randomness: a mask drawn in forward is the mask backward uses, at every budget.

A draw is either saved or replayed in backward from the generator state saved before it
(``run_with_rng_state``); never drawn afresh.

Two steps with different seeds each: if backward redrew a mask, or the compiled forward
drew a different number of random values than eager, the generator state would diverge and
the second step would differ too.

- ``fallback_random=True``: dropout stays ``native_dropout`` (eager's RNG calls), so the
  compiled step equals eager.
- ``fallback_random=False``: Inductor's RNG (``inductor_seeds`` -> ``inductor_random``),
  whose masks differ from eager's; our partitioner must then equal plain ``torch.compile``
  at the same seed, even where it recomputes ``inductor_random`` from the saved seed.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness.models import model_cases
from recompute_pass import recompute_backend, recompute_eager_backend
from recompute_pass import torch_internals as ti
from tests.support.full_size import FULL, full_only
from tests.support.harness import autograd_cache_off
from tests.support.stress import assert_same_run, assert_valid, random_ops_in, run_steps, spy_partitions

BUDGETS = [1.0, 0.75, 0.5, 0.25, 0.0]


class RandomMLP(nn.Module):
    """Every kind of draw: dropout, ``rand_like``, ``randn_like``, ``bernoulli``."""

    def __init__(self, dim: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(torch.relu(self.fc1(x)))
        h = F.gelu(self.fc2(h)) * torch.rand_like(h)
        h = h + 0.1 * torch.randn_like(h)
        h = h * torch.bernoulli(torch.full_like(h, 0.8))
        return F.dropout(self.fc3(h).tanh(), 0.5, training=True).square().mean()


def _inputs() -> list[torch.Tensor]:
    torch.manual_seed(1)
    return [torch.randn(8, 16)]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return RandomMLP()


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_draw_matches_eager_at_every_budget(budget: float, fallback_random: None) -> None:
    expected = run_steps(_model(), _inputs(), steps=2)
    # Saved bytes: budget 0 then recomputes every draw's consumers (what is to be replayed).
    backend = recompute_eager_backend.with_options(memory_budget=budget, budget_mode="saved", fallback=False)
    with spy_partitions() as spy:
        actual = run_steps(_model(), _inputs(), backend=backend, steps=2)
    assert_same_run(actual, expected)
    (call,) = spy.calls
    assert_valid(call)  # among others: no op that draws fresh randomness runs in backward
    (report,) = actual.reports
    draws = {"native_dropout", "rand", "randn", "bernoulli"}
    replayed = sorted(r.name for r in report.recomputed if r.op in draws)
    states = sorted(s.name.removesuffix("/rng_state") for s in report.saved if s.op == "rng_state")
    assert replayed == states and len(call.partition.replayed) == len(replayed)
    if budget == 0.0:  # not vacuous: the mask-consuming arithmetic is recomputed (these masks
        # are smaller than a CPU generator state, so saving them is what holds least)
        assert report.recomputed and report.saved_bytes == report.min_bytes < report.max_bytes


@pytest.mark.parametrize("solver", ["mincut", "no_recompute", "recompute_all", "selective"])
def test_fixed_policies_never_redraw(solver: str, fallback_random: None) -> None:
    """``recompute_all`` recomputes everything: the draws are replayed, never redrawn."""
    case = model_cases(layers=1, dim=32, seq=16)["gpt_block"]
    torch.manual_seed(0)
    model = case.build()
    torch.manual_seed(1)
    inputs = list(case.inputs(2))
    expected = run_steps(model, inputs, steps=2)
    backend = recompute_eager_backend.with_options(solver=solver, memory_budget=0.0, fallback=False)
    with spy_partitions() as spy:
        actual = run_steps(model, inputs, backend=backend, steps=2)
    assert_same_run(actual, expected)
    (call,) = spy.calls
    assert call.decision.plan.violations(call.problem) == []
    assert random_ops_in(call.partition.backward) == []  # no fresh draw in backward
    replays = [n for n in call.partition.backward.graph.nodes if n.target is ti.run_with_rng_state]
    assert len(replays) == len(call.partition.replayed)
    (report,) = actual.reports
    saved_draws = [s.name for s in report.saved if "native_dropout[" in s.name]
    if solver == "no_recompute":
        assert not replays and saved_draws
    if solver == "recompute_all":  # recomputes the dropout outputs, so replays their draws
        assert replays and not any("native_dropout[0]" in name for name in saved_draws)


def _inductor_rng_runs(model: nn.Module, inputs: list[torch.Tensor], budgets: list[float]):
    with autograd_cache_off(fallback_random=False):
        default = run_steps(model, inputs, backend="inductor", steps=2)
        ours = {}
        for budget in budgets:
            options = {"memory_budget": budget, "budget_mode": "saved", "fallback": False}
            backend = recompute_backend.with_options(**options)
            ours[budget] = run_steps(model, inputs, backend=backend, steps=2)
    return default, ours


def test_inductor_rng_matches_plain_torch_compile() -> None:
    model, inputs = _model(), _inputs()
    default, ours = _inductor_rng_runs(model, inputs, [1.0, 0.0])
    eager = run_steps(model, inputs, steps=2)
    # Inductor's RNG is not eager's: otherwise this test would prove nothing.
    assert not torch.allclose(default.outputs[0], eager.outputs[0])
    for budget, run in ours.items():
        assert_same_run(run, default)
        (report,) = run.reports
        recomputed = {r.op for r in report.recomputed}
        assert "inductor_seeds" not in recomputed
        if budget == 0.0:  # the mask is regenerated in backward from the saved seed, exactly
            assert "inductor_random" in recomputed
            assert report.saved_bytes < ours[1.0].reports[0].saved_bytes


@full_only("a GPT block through Inductor with its RNG")
def test_inductor_rng_gpt_block_matches_plain_torch_compile() -> None:
    case = model_cases(layers=1, dim=32, seq=16)["gpt_block"]
    torch.manual_seed(0)
    model = case.build()
    torch.manual_seed(1)
    inputs = list(case.inputs(2))
    default, ours = _inductor_rng_runs(model, inputs, [0.5, 0.0] if FULL else [0.0])
    for run in ours.values():
        assert_same_run(run, default)
