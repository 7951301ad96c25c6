"""``benchmarks.steps`` at a toy size: both modes run and write what they claim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import steps
from recompute_pass.step import PLANNER
from tests.support.harness import autograd_cache_off

TOY = ["--models", "hf_llama", "--layers", "2", "--dim", "32", "--seq", "16", "--batch", "1", "--vocab", "64"]


def test_the_steps_study_measures_a_route_at_a_toy_size(tmp_path: Path) -> None:
    """What the study writes; its figures' accuracy is the step tests' to check (a toy's
    fixed offsets of a few hundred bytes are a percent of its peak)."""
    args = [*TOY, "--routes", "break", "--budgets", "0", "--no-compare", "--out", str(tmp_path)]
    assert steps.main(args) == 0
    (row,) = json.loads((tmp_path / "steps.json").read_text())["rows"]
    assert (row["route"], row["budget"]) == ("break", 0.0) and row["graphs"] >= 2  # split by the break
    assert abs(row["predicted"] - row["measured"]) <= max(0.02 * row["measured"], 4096), row
    assert row["grad_error"] < 1e-4
    assert "One step, many graphs" in (tmp_path / "RESULTS.md").read_text()


def test_the_steps_timing_compares_with_torch_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timing mode's rows and table. Its configurations run in this process, each after
    a reset (the study test above runs one in a process of its own, as both modes do), with
    warm kernel caches: two fresh processes compiling cold cost the test a minute on 2
    cores, and only the figures, which no test reads, depend on them."""

    def here(spec: dict[str, object]) -> dict[str, object]:
        torch.compiler.reset()
        PLANNER.reset()
        return steps.run_one(spec)

    monkeypatch.setattr(steps, "_subprocess", here)
    # Nor are its caches cold: the two systems share the kernels they have in common.
    monkeypatch.setattr(steps, "benchmark_settings", lambda: autograd_cache_off(fallback_random=True))
    assert steps.main([*TOY, "--timing", "--budgets", "0", "--repeats", "1", "--out", str(tmp_path)]) == 0
    PLANNER.reset()
    rows = json.loads((tmp_path / "timing.json").read_text())["rows"]
    assert {r["system"] for r in rows} == {"compile", "recompute"}
    assert all(r["first_two_steps_s"] > 0 and r["grad_error"] < 1e-4 for r in rows)
    assert "ratio to torch.compile" in (tmp_path / "RESULTS.md").read_text()
