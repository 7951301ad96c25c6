"""``python -m benchmarks.gpu --dry-run``: the GPU run's five phases on CPU at toy sizes, so
the command a GPU loan runs cannot rot between loans (about a minute on 2 cores)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_runs_every_phase(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", "--dry-run", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    phases = json.loads((tmp_path / "gpu.json").read_text())["phases"]
    assert list(phases) == ["peak_llama", "peak_gpt2", "alternatives", "offload", "longest", "rng"]
    for name, phase in phases.items():
        assert phase["status"] == "ok" and phase["rows"], (name, phase["status"], phase["tail"])
    for name in ("peak_llama", "peak_gpt2"):
        rows = phases[name]["rows"]
        assert len(rows) == 4  # budgets 1 and 0, a cap between them, 0.5
        # Without codegen the prediction is exact; gradients equal eager's.
        assert all(abs(r["error"]) < 1e-3 and r["grad_diff"] < 1e-4 for r in rows), rows
    systems = [r["system"] for r in phases["alternatives"]["rows"]]
    assert systems == ["recompute", "compile", "compile_budget", "checkpoint"]
    assert all(r["error"] is None for r in phases["offload"]["rows"])
    ours = next(r for r in phases["longest"]["rows"] if r["system"] == "ours")
    assert ours["predicted"] == ours["longest"] and ours["measured_at_predicted"] <= ours["cap"]
    replayed = next(r for r in phases["rng"]["rows"] if r["system"] == "recompute")
    assert replayed["grads_ok"]
    text = (tmp_path / "RESULTS.md").read_text()
    assert "Device: CPU (dry run)" in text and "## 5. Dropout at budget 0" in text
    assert "fit_longest" in done.stdout  # the summary, on stdout
