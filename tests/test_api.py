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
    ]
    uuids = {RecomputePartitioner(RecomputeOptions(**v)).uuid() for v in variants}
    assert base.uuid() not in uuids and len(uuids) == len(variants)
