"""What a user sees outside the compile, across processes: a warm cache republishes the
first run's reports; ``TORCH_TRACE`` holds one report artifact per compiled graph;
``TORCH_LOGS=recompute_pass`` shows the summary. Each run is a fresh process
(``tests/support/report_script.py``), as a rerun of a training script is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(route: str, env: dict[str, str]) -> tuple[dict[str, object], str]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.report_script", route],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT ")), done.stderr


def _trace_artifacts(
    folder: Path,
) -> tuple[dict[tuple[int, int], list[dict[str, object]]], set[tuple[int, int]]]:
    """Our report artifacts by compile id, and the compile ids AOTAutograd's cache saw."""
    (trace,) = folder.iterdir()
    lines = trace.read_text().splitlines()
    reports: dict[tuple[int, int], list[dict[str, object]]] = {}
    compiled: set[tuple[int, int]] = set()
    for at, line in enumerate(lines):
        if "] {" not in line:
            continue
        record = json.loads(line.split("] ", 1)[1])
        name = record.get("artifact", {}).get("name", "")
        ident = (record.get("frame_id"), record.get("frame_compile_id"))
        if name.startswith("aotautograd_cache_"):
            compiled.add(ident)
        if name == "recompute_pass_report":
            payload = []
            for following in lines[at + 1 :]:
                if not following.startswith("\t"):
                    break
                payload.append(following[1:])
            reports.setdefault(ident, []).append(json.loads("\n".join(payload)))
    return reports, compiled


@pytest.mark.parametrize("route", ["backend", "install"])
def test_a_warm_cache_republishes_the_first_runs_reports(route: str, tmp_path: Path) -> None:
    """The second run returns the plan from AOTAutograd's cache without calling the
    partitioner; the reports it shows (``capture_reports``, the log line, the JSON, the
    trace artifact) are the first run's."""
    cache = str(tmp_path / "cache")
    cold, _ = _run(route, {"TORCHINDUCTOR_CACHE_DIR": cache, "TORCH_TRACE": str(tmp_path / "cold")})
    warm, _ = _run(route, {"TORCHINDUCTOR_CACHE_DIR": cache, "TORCH_TRACE": str(tmp_path / "warm")})
    assert (cold["misses"], cold["hits"]) == (2, 0)
    assert (warm["misses"], warm["hits"]) == (0, 2)  # no partitioner ran
    reports = [json.loads(text) for text in cold["reports"]]
    assert len(reports) == 2 and all(report["fallback"] is None for report in reports)
    assert warm["reports"] == cold["reports"] and warm["texts"] == cold["texts"]
    summaries = [line for line in cold["log"] if line.startswith("recompute_pass: predicted peak")]
    assert len(summaries) == 2 and _graphs_lines(warm) == _graphs_lines(cold)
    assert len(warm["steps"]) == len(cold["steps"]) == 1  # the step is planned in each run
    assert (warm["loss"], warm["grads"]) == (cold["loss"], cold["grads"])
    for run in ("cold", "warm"):
        artifacts, compiled = _trace_artifacts(tmp_path / run)
        assert len(compiled) == 2 and set(artifacts) == compiled  # one per compiled graph
        assert sorted(json.dumps(a, sort_keys=True) for each in artifacts.values() for a in each) == sorted(
            json.dumps(r, sort_keys=True) for r in reports
        )
        assert all(len(each) == 1 for each in artifacts.values())


def _graphs_lines(run: dict[str, object]) -> list[str]:
    """The log without the step's lines: the step is recorded afresh in each run (its
    measured timeline is not a cached artifact), the graphs' plans come from the cache."""
    return [line for line in run["log"] if not line.startswith("recompute_pass step:")]  # type: ignore[union-attr]


def test_torch_logs_shows_the_summary_under_our_module_name() -> None:
    """``TORCH_LOGS`` takes any importable module's name: ``recompute_pass`` (INFO, one line
    per graph) or ``+recompute_pass`` (DEBUG: the full report)."""
    script = (
        "import torch\n"
        "w = torch.randn(8, 8, requires_grad=True)\n"
        "f = torch.compile(lambda x: torch.tanh(x @ w).sum(), backend='recompute_eager')\n"
        "f(torch.randn(4, 8)).backward()\n"
    )
    for setting, wanted in (
        ("recompute_pass", "recompute_pass: predicted peak"),
        ("+recompute_pass", "saved:"),
    ):
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env={**os.environ, "TORCH_LOGS": setting},
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        assert wanted in done.stderr, done.stderr[-2000:]
    quiet = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600, check=True
    )
    assert "recompute_pass" not in quiet.stderr  # nothing unless asked: logging only
