"""Stage 6: the step, not the graph. A training step is often several compiled graphs
(per-block compile, graph breaks, DDP's buckets) with eager code between them; under a
step budget their plans are chosen together, so that the step's peak meets the budget.

``recording`` (plain data of one step) <- ``recorder`` (watches it run, through
``meters``); ``fronts`` (each graph's plans, as the step sees them); ``compose`` (the
step's peak under a choice) and ``choice`` (the choice); ``graphs`` (the callable Dynamo
runs, provisional until planned); ``planner`` (the process's coordinator); ``report``.

Floor 9: may import ``partitioner``, ``capture``, ``realization``, ``plan_sync``, ``report``,
``search``, ``solver``, ``memory``, ``graph``, ``options``, ``torch_internals`` and ``cost_model``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx

from recompute_pass.options import RecomputeOptions
from recompute_pass.step.graphs import StepGraph, describe
from recompute_pass.step.planner import PLANNER
from recompute_pass.step.report import StepReport

__all__ = ["PLANNER", "StepGraph", "StepReport", "plans_steps", "step_graph", "trains"]

_numbers = itertools.count()


def plans_steps(options: RecomputeOptions) -> bool:
    """Whether graphs compiled with ``options`` belong to a step that is recorded and
    reported, their plans chosen with it where the budget asks (``step_budget``): a peak
    budget, a budgeted solver, no offload or planned sizes (which stay per graph)."""
    return (
        options.plan_steps
        and options.budgets_peak
        and options.solver in ("milp", "mincut")
        and not options.offload
        and not options.plan_size_map()
    )


def trains(example_inputs: Sequence[object]) -> bool:
    """Whether AOTAutograd will make a joint graph of it (grad on, some input needs grad)."""
    return torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs
    )


def step_graph(
    gm: fx.GraphModule,
    example_inputs: Sequence[object],
    *,
    options: RecomputeOptions,
    inductor: bool,
    config_patches: dict[str, Any] | None,
) -> StepGraph:
    graph = StepGraph(
        gm,
        example_inputs,
        options=options,
        inductor=inductor,
        config_patches=config_patches,
        name=describe(gm, next(_numbers)),
        planner=PLANNER,
    )
    PLANNER.register(graph)
    return graph
