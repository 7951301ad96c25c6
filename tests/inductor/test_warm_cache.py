"""Warm caches never return a plan made for other options.

With Inductor's FX-graph cache and AOTAutograd's cache on (in a fresh cache directory), a
recompile with the same options must hit the cache (otherwise this test proves nothing),
and a recompile with another budget must miss it and produce exactly the plan a cold
compile at that budget produces.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from torch._dynamo.utils import counters
from torch._inductor.utils import fresh_cache

from benchmarks.harness.models import model_cases
from recompute_pass import recompute_backend
from recompute_pass import torch_internals as ti
from tests.support.harness import Step, assert_same_step, autograd_cache_off, build, case_inputs, run_step

CASE = model_cases(dim=32)["mlp"]


@pytest.fixture
def warm_caches() -> Iterator[None]:
    with (
        fresh_cache(),
        ti.inductor_config.patch(fx_graph_cache=True, force_disable_caches=False),
        ti.functorch_config.patch(enable_autograd_cache=True),
    ):
        yield


def _compile(budget: float) -> tuple[Step, int]:
    """A step compiled from scratch (Dynamo reset); how many AOTAutograd cache hits it had."""
    hits = counters["aot_autograd"]["autograd_cache_hit"]
    # Saved bytes: budgets 0 and 1 save different amounts on any model (the cache test's premise).
    backend = recompute_backend.with_options(memory_budget=budget, budget_mode="saved", fallback=False)
    step = run_step(build(CASE), case_inputs(CASE), backend=backend)
    return step, counters["aot_autograd"]["autograd_cache_hit"] - hits


@pytest.fixture(scope="module")
def cold_budget_zero() -> Step:
    with autograd_cache_off():
        return _compile(0.0)[0]


def test_changing_the_budget_with_warm_caches_gives_the_new_plan(warm_caches: None, cold_budget_zero) -> None:
    first, hits = _compile(1.0)
    assert hits == 0 and len(first.reports) == 1  # cold: our partitioner ran
    again, hits = _compile(1.0)
    # Warm: the cache answered, no partitioner ran; the report is the one stored with the
    # entry (``recompute_pass.report.store``).
    assert hits == 1 and again.reports == first.reports
    assert again.saved_bytes == first.saved_bytes

    changed, hits = _compile(0.0)
    assert hits == 0, "a cache entry made for budget 1.0 was reused for budget 0.0"
    (report,) = changed.reports
    (cold,) = cold_budget_zero.reports
    assert report.to_text() == cold.to_text()
    assert changed.saved_bytes == cold_budget_zero.saved_bytes < first.saved_bytes
    assert_same_step(changed, cold_budget_zero)

    back, hits = _compile(1.0)  # both entries now live side by side
    assert hits == 1 and back.saved_bytes == first.saved_bytes
    assert back.reports == first.reports  # each entry's own report, not the latest one
