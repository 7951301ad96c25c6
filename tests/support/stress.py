"""Shared by the stress tests: partition spies, multi-step runs, tolerances.

Their size is ``full_size``'s: ``RECOMPUTE_FULL=1`` switches them from their CI size (a few
minutes on two cores) to the full sweeps.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch import fx

import recompute_pass.partitioner as partitioner_module
import recompute_pass.realization as realization_module
from recompute_pass import PartitionReport, capture_reports
from recompute_pass.extract.extraction import Partition
from recompute_pass.search.decide import Decision
from recompute_pass.solver.problem import Problem

# bf16 autocast: eager and compiled round intermediate values to bf16 at different points
# (decompositions, fused casts), so gradients agree only to bf16 precision (8 bits of
# mantissa: 2**-8 = 3.9e-3). 1.6e-2 relative is four bf16 ulps; the absolute term covers
# gradients that are sums of many rounded products near zero.
BF16_RTOL, BF16_ATOL = 1.6e-2, 2e-3


@dataclass
class Partitioned:
    """What one call of our partitioner decided and built (one per compiled graph)."""

    problem: Problem
    decision: Decision
    partition: Partition


@dataclass
class Spy:
    calls: list[Partitioned] = field(default_factory=list)
    _pending: list[tuple[Problem, Decision]] = field(default_factory=list)
    _realized: dict[object, Partition] = field(default_factory=dict)  # this partition's, by plan


@contextlib.contextmanager
def spy_partitions() -> Iterator[Spy]:
    """Record the problem, decision and extracted graphs of every partition in the block.

    Wraps the partitioner's stage functions (``decide``, ``extract_plan``) without
    changing what they return, so a test can check the plan independently of the report.
    A peak budget extracts plans while it decides, the chosen one among them.
    """
    spy = Spy()
    decide, extract_plan = partitioner_module.decide, realization_module.extract_plan

    def spying_decide(problem: Problem, options: Any, scorer: Any = None) -> Decision:
        spy._realized.clear()
        decision = decide(problem, options, scorer)
        if decision.plan in spy._realized:
            spy.calls.append(Partitioned(problem, decision, spy._realized[decision.plan]))
        else:
            spy._pending.append((problem, decision))
        return decision

    def spying_extract(costed: Any, plan: Any, *args: Any, **kwargs: Any) -> Any:
        result = extract_plan(costed, plan, *args, **kwargs)
        spy._realized[plan] = result[0]
        if spy._pending and spy._pending[-1][1].plan == plan:
            problem, decision = spy._pending.pop()
            spy.calls.append(Partitioned(problem, decision, result[0]))
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(partitioner_module, "decide", spying_decide)
        patch.setattr(realization_module, "extract_plan", spying_extract)
        yield spy


def random_ops_in(graph: fx.GraphModule) -> list[str]:
    """Nodes of ``graph`` that draw fresh random numbers (a second draw differs).

    Attention kernels carry the ``nondeterministic_seeded`` tag for their ``dropout_p``;
    with ``dropout_p=0`` they draw nothing and may be recomputed.
    """
    return [
        node.name
        for node in graph.graph.nodes
        if node.op == "call_function"
        and torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
        and _dropout_p(node) != 0.0
    ]


def _dropout_p(node: fx.Node) -> object:
    schema = node.target._schema  # type: ignore[union-attr]
    names = [a.name for a in schema.arguments]
    if "dropout_p" not in names:
        return None  # not an attention kernel: a real draw
    index = names.index("dropout_p")
    if "dropout_p" in node.kwargs:
        return node.kwargs["dropout_p"]
    return node.args[index] if index < len(node.args) else schema.arguments[index].default_value


def assert_valid(call: Partitioned) -> None:
    """The plan is executable, within its budget, and the backward redraws no randomness."""
    plan, problem, decision = call.decision.plan, call.problem, call.decision
    assert plan.violations(problem) == []
    assert plan.size(problem) <= decision.budget_bytes
    if decision.budget_ratio is not None and decision.min_bytes is not None:
        span = decision.max_bytes - decision.min_bytes
        assert decision.budget_bytes == decision.min_bytes + int(span * decision.budget_ratio)
    assert random_ops_in(call.partition.backward) == []


@dataclass
class Run:
    """Several training steps of one model: what a user would observe."""

    outputs: list[Any]
    grads: dict[str, torch.Tensor]
    states: list[dict[str, torch.Tensor]]  # parameters and buffers after each step
    inputs: list[torch.Tensor]  # the inputs after the last step (forward may mutate them)
    reports: list[PartitionReport]


def run_steps(
    model: torch.nn.Module,
    inputs: Sequence[torch.Tensor],
    *,
    backend: Callable[..., Any] | str | None = None,
    steps: int = 1,
    dynamic: bool | None = None,
    loss: Callable[[Any], torch.Tensor] | None = None,
    seed: int = 0,
) -> Run:
    """``steps`` forward+backward passes of a copy of ``model`` on copies of ``inputs``.

    Gradients accumulate across steps (no optimizer), so a second step that reuses a
    stale saved value or updates a buffer twice shows in the result.
    """
    model = copy.deepcopy(model)
    inputs = [x.clone() for x in inputs]
    fn: Callable[..., Any] = model
    if backend is not None:
        torch._dynamo.reset()
        fn = torch.compile(model, backend=backend, dynamic=dynamic)
    outputs: list[Any] = []
    states: list[dict[str, torch.Tensor]] = []
    with capture_reports() as reports:
        for step in range(steps):
            torch.manual_seed(seed + step)
            out = fn(*inputs)
            (loss or _default_loss)(out).backward()
            outputs.append(_detached(out))
            states.append({n: t.detach().clone() for n, t in model.state_dict(keep_vars=True).items()})
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return Run(outputs, grads, states, inputs, reports)


def _default_loss(out: Any) -> torch.Tensor:
    return out


def _detached(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, tuple | list):
        return type(out)(_detached(o) for o in out)
    return out


def assert_same_run(actual: Run, expected: Run, *, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Same outputs, gradients (the same parameters receive one), state after every step
    (integer buffers such as ``num_batches_tracked`` exactly) and inputs."""
    torch.testing.assert_close(actual.outputs, expected.outputs, rtol=rtol, atol=atol)
    assert actual.grads.keys() == expected.grads.keys()
    torch.testing.assert_close(actual.grads, expected.grads, rtol=rtol, atol=atol)
    torch.testing.assert_close(actual.states, expected.states, rtol=rtol, atol=atol)
    torch.testing.assert_close(actual.inputs, expected.inputs, rtol=rtol, atol=atol)
