"""The public surface: config, per-compile options, registered names, cache identity."""

from __future__ import annotations

import pytest
import torch

import recompute_pass
from recompute_pass import RecomputeOptions, RecomputePartitioner, capture_reports, config, recompute_backend


def test_config_attributes_are_validated_and_patch_restores() -> None:
    assert config.memory_budget == 1.0
    with config.patch(memory_budget=0.25, solver="mincut"):
        assert config.memory_budget == 0.25
        assert recompute_backend.options().solver == "mincut"
        with pytest.raises(ValueError, match="memory_budget"):
            config.memory_budget = 2.0
        assert config.memory_budget == 0.25  # a rejected value changes nothing
    assert config.options() == RecomputeOptions()


def test_config_module_assignment() -> None:
    try:
        recompute_pass.config.memory_budget = 0.5
        assert config.options().memory_budget == 0.5
    finally:
        recompute_pass.config.memory_budget = 1.0


def test_with_options_overrides_config_and_validates_eagerly() -> None:
    backend = recompute_backend.with_options(memory_budget=0.3)
    with config.patch(memory_budget=0.9, solver="selective"):
        options = backend.options()
    assert (options.memory_budget, options.solver) == (0.3, "selective")
    assert backend.with_options(solver="mincut").options().memory_budget == 0.3
    with pytest.raises(ValueError, match="solver"):
        recompute_backend.with_options(solver="fastest")
    with pytest.raises(ValueError, match="unknown option"):
        recompute_backend.with_options(budget=0.5)


def test_backend_is_registered_by_name() -> None:
    """The ``torch_dynamo_backends`` entry point: ``backend="recompute_eager"`` reaches us."""
    torch.compiler.reset()
    weight = torch.randn(8, 8, requires_grad=True)
    fn = torch.compile(lambda x: torch.tanh(x @ weight).sum(), backend="recompute_eager")
    with capture_reports() as reports:
        fn(torch.randn(4, 8)).backward()
    assert len(reports) == 1 and reports[0].fallback is None
    assert weight.grad is not None


def test_uuid_covers_every_option() -> None:
    base = RecomputePartitioner(RecomputeOptions())
    assert base.uuid() == RecomputePartitioner(RecomputeOptions()).uuid()
    variants = [
        {"memory_budget": 0.5},
        {"memory_budget_bytes": 1000},
        {"solver": "mincut"},
        {"device": "h100"},
        {"time_limit": 3.0},
        {"fallback": False},
        {"sync_plans": False},
    ]
    uuids = {RecomputePartitioner(RecomputeOptions(**v)).uuid() for v in variants}
    assert base.uuid() not in uuids and len(uuids) == len(variants)


def test_plan_digest_identifies_the_plan_and_stays_out_of_the_text() -> None:
    """Same graph and plan: same digest (the distributed tests compare it across processes);
    another plan: another digest. The text form pins decisions only."""
    torch.compiler.reset()
    weight = torch.randn(16, 16, requires_grad=True)

    def step(budget: float) -> recompute_pass.PartitionReport:
        torch.compiler.reset()
        fn = torch.compile(
            lambda x: torch.tanh(torch.sin(x @ weight) @ weight).sum(),
            # Saved bytes: budgets 0 and 1 give two plans (at peak budgets, one plan may fit both).
            backend=recompute_pass.recompute_eager_backend.with_options(
                memory_budget=budget, budget_mode="saved"
            ),
        )
        with capture_reports() as reports:
            fn(torch.randn(4, 16)).backward()
        (report,) = reports
        return report

    first, again, low = step(1.0), step(1.0), step(0.0)
    assert len(first.plan_digest) == 64 and first.plan_digest == again.plan_digest
    assert [s.name for s in first.saved] != [s.name for s in low.saved]
    assert low.plan_digest != first.plan_digest
    assert first.plan_digest not in first.to_text()
    assert (first.rank, first.world_size) == (0, 1) and "rank" not in first.summary()
