"""One prepared GPU run: the claims made on CPU, measured on an H100 or H200 in one command.

    python -m benchmarks.gpu [--out benchmarks/gpu/results] [--phases NAME ...] [--dry-run]

Five phases (issue 49), each in a process of its own (``benchmarks.gpu.phases``) with a
time limit; a phase over its limit is killed with everything it started, keeps the rows
it had written, and the next phase runs. The whole run stops itself at ``DEADLINE``
seconds, before 9 minutes, whatever the phases' own limits; their limits add up to 7 min
40 s, so on one H100 the run ends within 8 minutes, compiles included.

- ``peak_llama`` (115 s), 1.: HF Llama from config (12 layers, width 1024, 2048 tokens,
  bf16 autocast): ours at budgets 1, 0, a ``peak_memory_bytes`` cap midway between their
  predicted peaks, and 0.5; predicted against measured peak, gradients against eager.
- ``peak_gpt2`` (115 s), 1.: the same on HF GPT-2 (dropout off).
- ``alternatives`` (65 s), 2.: on the HF Llama, ours at 0.5 against ``torch.compile``,
  PyTorch's budget partitioner at 0.5 and eager per-block checkpointing: peak and step
  time (median of 10 steps) as ratios to ours.
- ``offload`` (75 s), 3.: the offload benchmark (docs/offload.md) at budget 0.5 (2-layer Llama,
  8 x 1024 tokens, width 768): recompute + offload, recompute alone capped at the peak
  the offload plan measured, and the recompute-only plan; peaks and step times.
- ``longest`` (60 s), 4.: ``fit_longest`` on a 2-layer Llama (width 768, batch 4) under a
  4 GiB cap: predicted against measured boundary, beside ``torch.compile`` and per-block
  checkpointing under the same cap.
- ``rng`` (30 s), 5.: nanoGPT (dropout 0.1, 8 x 1024 tokens) at budget 0 with CUDA's
  Philox generator: gradients against eager from the same seed; PyTorch's budget
  partitioner at 0 beside it.

Peaks: ``max_memory_allocated`` above ``memory_allocated`` before the step (after
``reset_peak_memory_stats``), the loss held through backward, ``.grad``s None before it.
Writes ``<out>/gpu.json`` (every phase's rows, status and time), ``<out>/RESULTS.md`` and
each phase's ``<phase>.json`` and ``<phase>.log``, and prints a one-screen summary.

``--dry-run`` runs the same phases on CPU at toy sizes without codegen (peaks from the
profiler's allocation events), two at a time, under twice the limits:
``tests/inductor/test_gpu_run.py`` runs it (about 145 s of CPU time).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.harness.snapshot import ROOT
from benchmarks.harness.study import Row, command, parser, progress, save_json, write_results

DEADLINE = 510.0  # seconds: 8.5 minutes, the whole run
MIB = float(1 << 20)


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float  # its time limit
    title: str


PHASES = (
    Phase("peak_llama", 115, "1. Peak exactness under CUDA: HF Llama"),
    Phase("peak_gpt2", 115, "1. Peak exactness under CUDA: HF GPT-2"),
    Phase("alternatives", 65, "2. Against what users would pick instead (HF Llama)"),
    Phase("offload", 75, "3. Offload against recompute alone at equal peak"),
    Phase("longest", 60, "4. fit_longest under a cap"),
    Phase("rng", 30, "5. Dropout at budget 0: replayed Philox draws"),
)


@dataclass
class Running:
    """A phase's process (the leader of a session of its own: its children die with it)."""

    phase: Phase
    proc: subprocess.Popen
    log: Path
    limit: float
    started: float

    @classmethod
    def start(cls, phase: Phase, out: Path, dry_run: bool, limit: float) -> Running:
        argv = [sys.executable, "-m", "benchmarks.gpu.phases", phase.name, "--out", str(out)]
        argv += ["--seconds", f"{limit:.0f}", *(["--dry-run"] if dry_run else [])]
        log = out / f"{phase.name}.log"
        with open(log, "w") as sink:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=sink, stderr=sink, start_new_session=True)
        return cls(phase, proc, log, limit, time.perf_counter())

    @property
    def over(self) -> bool:
        return time.perf_counter() - self.started > self.limit

    def finish(self) -> dict[str, object]:
        """Its status, seconds, rows (what its JSON holds) and, unless it ended well, the
        last lines of its log. A phase over its limit is killed first."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            status = f"stopped at its limit ({self.limit:.0f} s)"
        else:
            status = "ok" if self.proc.returncode == 0 else f"failed (exit {self.proc.returncode})"
        rows_file = self.log.with_suffix(".json")
        rows = json.loads(rows_file.read_text()) if rows_file.exists() else []
        tail = self.log.read_text().strip().splitlines()[-3:] if status != "ok" else []
        seconds = round(time.perf_counter() - self.started, 1)
        return {"status": status, "seconds": seconds, "rows": rows, "tail": tail}


def run_phases(phases: Sequence[Phase], out: Path, dry_run: bool) -> dict[str, dict]:
    """Each phase in its own process, each stopped at its limit and none started or left
    running past ``DEADLINE``. One GPU: one phase at a time, so step times hold. The dry
    run's tiny phases share the CPU two at a time, under twice the limits (a CI machine's
    cores may be loaded)."""
    at_once, scale = (2, 2.0) if dry_run else (1, 1.0)
    started = time.perf_counter()
    pending, running, results = list(phases), [], {}
    while pending or running:
        while pending and len(running) < at_once:
            phase = pending.pop(0)
            left = scale * DEADLINE - (time.perf_counter() - started)
            if left < 10:
                results[phase.name] = {"status": "not run (deadline)", "seconds": 0, "rows": [], "tail": []}
                continue
            limit = min(scale * phase.seconds, left)
            progress(f"{phase.title} (limit {limit:.0f} s) ...")
            running.append(Running.start(phase, out, dry_run, limit))
        time.sleep(0.2)
        for done in [r for r in running if r.proc.poll() is not None or r.over]:
            running.remove(done)
            results[done.phase.name] = done.finish()
            result = results[done.phase.name]
            progress(f"  {done.phase.name}: {result['status']}, {result['seconds']} s")
    return {p.name: results[p.name] for p in phases}


def _mib(n: object) -> str:
    return "-" if n is None else f"{n / MIB:,.1f}"  # type: ignore[operator]


def _pct(x: object) -> str:
    return "-" if x is None else f"{x:+.2%}"  # type: ignore[str-format]


def _budget(row: Row) -> str:
    if row.get("peak_memory_bytes") is not None:
        return f"cap {_mib(row['peak_memory_bytes'])} MiB"
    budget = row.get("memory_budget", row.get("budget"))
    return "-" if budget is None else f"{budget:g}"


def lines_of(name: str, rows: list[Row]) -> list[str]:
    """A phase's rows as table lines (Markdown), the figures the issue asks for."""
    if name.startswith("peak") or name in ("alternatives", "rng"):
        head = "| model | system | budget | predicted (MiB) | measured (MiB) | error | grad diff | step ms |"
        extra = {"alternatives": " peak x ours | step x ours |", "rng": " gradients |"}.get(name, "")
        lines = [head + extra, "|" + "---|" * (head.count("|") - 1 + extra.count("|"))]
        for r in rows:
            cells = (
                f"| {r['model']} | {r['system']} | {_budget(r)} | {_mib(r['predicted_peak'])}"
                f" | {_mib(r['measured_peak'])} | {_pct(r['error'])} | {r['grad_diff']:.1e}"
                f" | {r['step_s'] * 1e3:.1f} |"
            )
            if name == "alternatives":
                cells += f" {r['peak_x_ours']:.2f} | {r['step_x_ours']:.2f} |"
            if name == "rng":
                cells += f" {'equal to eager' if r['grads_ok'] else '**wrong**'} |"
            lines.append(cells)
        return lines
    if name == "offload":
        lines = ["| system | budget | peak cap | predicted (MiB) | measured (MiB) | step (ms) | gradients |"]
        lines.append("|---|---|---|---|---|---|---|")
        for r in rows:
            if r.get("error"):
                lines.append(f"| {r['system']} | {_budget(r)} | error: {str(r['error'])[:80]} | | | | |")
                continue
            lines.append(
                f"| {r['system']} | {_budget(r)} | {_mib(r.get('budget_bytes'))} | "
                f"{_mib(r.get('report_predicted_peak_bytes'))} | {_mib(r['peak_bytes'])} | "
                f"{(r['step_seconds'] or 0) * 1e3:.1f} | {'right' if r['grads_ok'] else '**wrong**'} |"
            )
        return lines
    lines = ["| system | cap (MiB) | longest (measured) | predicted | peak at predicted (MiB) | grad diff |"]
    lines.append("|---|---|---|---|---|---|")
    for r in rows:
        longest = f"{r['longest']}{'+' if r['beyond_high'] else ''}"
        diff = "-" if r["grad_diff"] is None else f"{r['grad_diff']:.1e}"
        lines.append(
            f"| {r['system']} | {_mib(r['cap'])} | {longest} | {r['predicted'] or '-'} | "
            f"{_mib(r['measured_at_predicted'])} | {diff} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    made = parser("benchmarks.gpu", __doc__, out=Path("benchmarks/gpu/results"))
    made.add_argument("--dry-run", action="store_true", help="the same phases on CPU at toy sizes")
    made.add_argument("--phases", nargs="+", choices=[p.name for p in PHASES], help="default: all, in order")
    args = made.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        made.error("no GPU here: --dry-run runs the phases on CPU")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    device = "CPU (dry run)" if args.dry_run else torch.cuda.get_device_name(0)
    started = time.perf_counter()
    phases = [p for p in PHASES if not args.phases or p.name in args.phases]
    results = run_phases(phases, out, args.dry_run)
    wall = time.perf_counter() - started
    run = command("benchmarks.gpu", argv)
    save_json(out / "gpu.json", run, device=device, wall_seconds=round(wall, 1), phases=results)
    body = [f"Device: {device}; wall time {wall:.0f} s (limit {DEADLINE:.0f} s).", ""]
    for phase in PHASES:
        if phase.name in results:
            result = results[phase.name]
            body += [f"## {phase.title}", "", f"{result['status']}, {result['seconds']} s.", ""]
            body += [*lines_of(phase.name, result["rows"]), "", *(f"    {t}" for t in result["tail"]), ""]  # type: ignore[arg-type]
    write_results(out, "One prepared GPU run", run, body, wall)
    print("\n".join(line for line in body if not line.startswith("|---")))
    return 0
