"""The GPU benchmark's offload systems, planned and resolved without running a step."""

from __future__ import annotations

from benchmarks.frontier import _resolve, plan_configs
from benchmarks.harness.records import Config, Record
from benchmarks.harness.systems import DEFAULT_SYSTEMS, OFFLOAD_SYSTEMS, SYSTEMS


def test_recompute_only_runs_at_the_offload_plans_measured_peak() -> None:
    configs = plan_configs(
        ["llama"],
        ["recompute_peak_at_offload", "recompute_offload"],
        [0.5],
        path="inductor",
        device="cuda",
        size="large",
        repeats=1,
    )
    assert [c.system for c in configs] == ["recompute_offload", "recompute_peak_at_offload"]
    at_peak = configs[1]
    assert "no recompute_offload record" in str(_resolve(at_peak, {}))
    record = Record("llama", "recompute_offload", 0.5, None, "inductor", "cuda", "large", peak_bytes=123_456)
    resolved = _resolve(at_peak, {("llama", "recompute_offload", 0.5, "inductor", "cuda", "large"): record})
    assert isinstance(resolved, Config) and resolved.budget_bytes == 123_456
    options = SYSTEMS["recompute_peak_at_offload"].partitioner(0.5, 123_456).options  # type: ignore[union-attr]
    assert options.peak_memory_bytes == 123_456 and not options.offload
    options = SYSTEMS["recompute_offload"].partitioner(0.5, None).options  # type: ignore[union-attr]
    assert options.offload and options.budgets_peak and options.memory_budget == 0.5
    assert not set(OFFLOAD_SYSTEMS) & set(DEFAULT_SYSTEMS)  # asked for by name (a GPU run)
