"""Freeze the code under test for a run: a sweep takes an hour, the tree keeps changing.

The runner copies ``recompute_pass``, ``cost_model`` and ``benchmarks`` to a temporary
directory and starts every worker there (``python -m`` puts the working directory first on
``sys.path``, ahead of the editable install), so one run measures one version of the code.
Each record carries that version's ``code_hash`` (``recompute_pass.partitioner.code_hash``:
the same digest that keys Inductor's caches).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

PACKAGES = ("recompute_pass", "cost_model", "benchmarks")
ROOT = Path(__file__).resolve().parents[2]  # the repository: benchmarks/harness/snapshot.py


def snapshot_code(root: Path = ROOT) -> Path:
    """A private copy of the packages; the caller removes it."""
    destination = Path(tempfile.mkdtemp(prefix="recompute-bench-"))
    ignore = shutil.ignore_patterns("__pycache__", "results", "out", "*.png")
    for package in PACKAGES:
        shutil.copytree(root / package, destination / package, ignore=ignore)
    return destination


def git_state(root: Path = ROOT) -> dict[str, object]:
    """HEAD and whether the packages differ from it (a run of uncommitted code says so)."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    return {
        "head": git("rev-parse", "--short", "HEAD") or None,
        "dirty": bool(git("status", "--porcelain", "--", "recompute_pass", "cost_model")),
    }
