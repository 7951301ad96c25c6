"""``benchmarks.steps`` at a toy size: both modes run and write what they claim."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import steps

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


def test_the_steps_timing_compares_with_torch_compile(tmp_path: Path) -> None:
    assert steps.main([*TOY, "--timing", "--budgets", "0", "--repeats", "1", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "timing.json").read_text())["rows"]
    assert {r["system"] for r in rows} == {"compile", "recompute"}
    assert all(r["first_two_steps_s"] > 0 for r in rows)
    assert "ratio to torch.compile" in (tmp_path / "RESULTS.md").read_text()
