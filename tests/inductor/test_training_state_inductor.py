"""State and aliasing: what a training step changes besides gradients, at every budget:
the cases through Inductor (the rest are in ``tests/eager/test_training_state.py``)."""

from __future__ import annotations

import pytest

from recompute_pass import recompute_backend
from tests.eager.test_training_state import (  # noqa: F401 (fixtures among them)
    BUDGETS,
    _build,
    _eager,
    _ours,
    _saved_ops,
    pytestmark,
)
from tests.support.harness import autograd_cache_off
from tests.support.stress import assert_same_run, run_steps


@pytest.mark.parametrize("budget", BUDGETS)
def test_a_buffer_read_after_its_update_is_saved_through_inductor(budget: float) -> None:
    """Inductor keeps the update in the graph (``copy_``); the eager route has AOTAutograd
    write it back after the forward (``test_step_equals_eager``). Either way the read of
    the updated counter is saved, and the step equals eager's: recomputed, it gave
    gradients 3x off (as ``torch.compile``'s own partitioner does in torch 2.13)."""
    model, inputs, _ = _build("step_counter")
    backend = recompute_backend.with_options(memory_budget=budget, fallback=False)
    with autograd_cache_off():
        run = run_steps(model, inputs, backend=backend, steps=2)
    assert_same_run(run, _eager("step_counter"), rtol=1e-4, atol=1e-5)
    assert [state["step"].item() for state in run.states] == [1.0, 2.0]
    assert "add" in _saved_ops(run)
    assert "add" in _saved_ops(_ours("step_counter", budget)[0])


def test_batchnorm_through_inductor_updates_once() -> None:
    """Inductor keeps buffer mutations in the graph (``copy_``): never recomputed."""
    model, inputs, _ = _build("batchnorm")
    backend = recompute_backend.with_options(memory_budget=0.0, fallback=False)
    with autograd_cache_off():
        run = run_steps(model, inputs, backend=backend, steps=2)
    assert_same_run(run, _eager("batchnorm"), rtol=1e-4, atol=1e-5)
    assert [run.states[k]["bn1.num_batches_tracked"].item() for k in (0, 1)] == [1, 2]
