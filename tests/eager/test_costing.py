"""Stage 2's prices (``graph.costing``): what recomputing a value costs as Inductor runs it."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from cost_model import is_constructor
from recompute_pass import recompute_eager_backend
from recompute_pass.graph.costing import build_problem, resolve_device
from tests.support.harness import run_step
from tests.support.joint_graphs import analyzed, capture_joints

TOKENS, WIDTH, VOCAB = 64, 16, 96


class ClassifierHead(nn.Module):
    """A linear layer into a cross-entropy loss: ``nll_loss``'s backward builds its one-hot
    mask, ``where(eq(iota, target), -1/N, 0)``, from constructors."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(WIDTH, VOCAB)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.proj(torch.relu(x)), target)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(TOKENS, WIDTH, requires_grad=True), torch.randint(0, VOCAB, (TOKENS,))


@functools.cache
def _costed():
    (captured,) = capture_joints(ClassifierHead(), _inputs())
    joint = analyzed(captured)
    return build_problem(joint, resolve_device("cpu", joint))


def test_constructors_cost_nothing_to_recompute() -> None:
    """Inductor computes a constructor inside the kernel that reads it: no launch, no bytes."""
    costed = _costed()
    constructed = [
        (c.node.name, item.recompute_cost)
        for c, item in zip(costed.joint.candidates, costed.problem.items, strict=False)
        if is_constructor(c.node)
    ]
    assert constructed, "the loss's backward builds its mask from constructors"
    assert all(cost == 0.0 for _, cost in constructed), constructed


def test_a_tensor_reading_factory_is_not_a_constructor() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.zeros(4)
    full = graph.call_function(torch.ops.aten.full.default, ([4], 0.0))
    like = graph.call_function(torch.ops.aten.zeros_like.default, (x,))
    assert is_constructor(full)
    assert not is_constructor(like)


@pytest.mark.parametrize("budget", [1.0, 0.0])
def test_the_fastest_plan_of_a_classifier_head_saves_one_logits_sized_tensor(budget) -> None:
    """PyTorch saves one logits-sized tensor at the loss (the log-softmax); pricing the mask's
    constructors as kernel launches made the mask look cheaper to save than to rebuild, so
    budget 1 saved two. At budget 0 the mask is not saved either; gradients equal eager."""
    backend = recompute_eager_backend.with_options(memory_budget=budget, fallback=False)
    step = run_step(ClassifierHead(), _inputs(), backend=backend)
    (report,) = step.reports
    logits_sized = [s for s in report.saved if s.bytes >= TOKENS * VOCAB]
    assert len(logits_sized) <= 1, logits_sized
    eager = run_step(ClassifierHead(), _inputs())
    for name, grad in eager.grads.items():
        torch.testing.assert_close(step.grads[name], grad)
