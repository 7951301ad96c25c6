"""A step of several compiled graphs, planned as one (``recompute_pass.step``):
the cases through Inductor (the rest are in ``tests/eager/test_steps.py``)."""

from __future__ import annotations

import pytest

import recompute_pass
from tests.eager.test_steps import (  # noqa: F401 (an autouse fixture among them)
    LAYERS,
    _check_route,
    _fresh_planner,
    _llama,
    _measured,
    _planned_step,
)


@pytest.mark.parametrize("route", ["block", "break"])
def test_a_step_of_many_graphs_meets_its_budget_through_inductor(route: str) -> None:
    _check_route(route, recompute_pass.recompute_backend)


def test_install_plans_the_step_of_a_per_block_compile() -> None:
    """A trainer's own ``block.compile()`` (Inductor, by default), our partitioner installed:
    the blocks' step is planned, and its cap holds."""
    model = _llama()
    with recompute_pass.install(memory_budget=0.0):
        compiled, report = _planned_step(model, "block", "inductor")
        peak, _ = _measured(compiled, model)
    assert report.calls == LAYERS and all(g.planned for g in report.graphs)
    assert peak == pytest.approx(report.predicted_peak_bytes, rel=0.01)
