"""The memory/recompute frontier of every system on every model, in one run.

    python -m benchmarks.frontier [--quick] [--models gpt llama ...] [--device cpu|cuda] [--out DIR]

Each configuration (model, system, budget) runs in a fresh ``benchmarks.frontier.worker`` process;
records stream to ``DIR/records.jsonl`` (``--resume`` skips those already there), and at
the end ``DIR`` gets ``records.json``/``records.csv``, ``RESULTS.md`` and one PNG per model.
``--quick``: small models, budgets 0/0.5/1, the no-codegen ``graphs`` path, two processes
at a time; under 5 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import datetime
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.frontier.frontier_report import write_report
from benchmarks.harness.analysis import held
from benchmarks.harness.cases import SIZES, bench_cases
from benchmarks.harness.machine import load_average, machine
from benchmarks.harness.records import FIELDS, Config, Record
from benchmarks.harness.snapshot import ROOT, git_state, snapshot_code
from benchmarks.harness.study import command, parser, progress
from benchmarks.harness.systems import DEFAULT_SYSTEMS, PATHS, PYTORCH_DEFAULT_BUDGET, QUICK_SYSTEMS, SYSTEMS

FULL_BUDGETS = tuple(round(0.1 * i, 1) for i in range(11))
QUICK_BUDGETS = (0.0, 0.5, 1.0)
QUICK_MODELS = ("gpt", "llama", "cnn")  # quick: HF models only when asked for


@dataclass(frozen=True)
class Plan:
    configs: tuple[Config, ...]
    jobs: int
    timeout: float


def plan_configs(
    models: Sequence[str],
    systems: Sequence[str],
    budgets: Sequence[float],
    *,
    path: str,
    device: str,
    size: str,
    repeats: int,
) -> list[Config]:
    """Budget-independent systems once per model, budgeted ones at every budget.

    Systems with a byte budget come last: they need another system's record.
    """
    configs = []
    for model in models:
        for name in systems:
            system = SYSTEMS[name]
            for budget in budgets if system.budgeted else (None,):
                if system.pytorch_budget and budget == PYTORCH_DEFAULT_BUDGET and "compile" in systems:
                    continue  # that configuration is plain ``compile``; measured once
                configs.append(Config(model, name, budget, path, device, size, repeats))
    return sorted(configs, key=lambda c: SYSTEMS[c.system].by_bytes)


def _resolve(config: Config, done: dict[tuple, Record]) -> Config | str:
    """Fill in an absolute budget from the record it depends on, or say why not.

    The bytes are in our budget's units: the activations the other system's step really
    saved (a graph count would count a saved view and its base twice; the run-time count
    includes Inductor's layout copies, which our partitioner charges too) plus the user
    inputs its graphs save; parameters and buffers excluded.
    """
    peak_source = SYSTEMS[config.system].peak_from
    if peak_source is not None:
        record = done.get(_key(replace(config, system=peak_source, budget_bytes=None)))
        if record is None or not record.ok or record.peak_bytes is None:
            return f"no {peak_source} record to take the peak cap from"
        return replace(config, budget_bytes=record.peak_bytes)
    source = SYSTEMS[config.system].bytes_from
    if source is None:
        return config
    budget = config.budget if SYSTEMS[source].budgeted else None
    other = done.get(_key(replace(config, system=source, budget=budget, budget_bytes=None)))
    if other is None and SYSTEMS[source].pytorch_budget and budget == PYTORCH_DEFAULT_BUDGET:
        other = done.get(_key(replace(config, system="compile", budget=None, budget_bytes=None)))
    if other is None or other.saved_bytes is None or other.graph_saved_input_bytes is None:
        return f"no {source} record to take the byte budget from"
    return replace(config, budget_bytes=held(other))


def _key(config: Config | Record) -> tuple:
    return (config.model, config.system, config.budget, config.path, config.device, config.size)


def run_worker(config: Config, timeout: float, code: Path = ROOT) -> Record:
    """One configuration in a fresh interpreter started in ``code`` (a snapshot of the
    packages, see ``benchmarks.harness.snapshot``); the record comes back through a file."""
    env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1", "PYTHONWARNINGS": "ignore"}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "record.json"
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.frontier.worker", json.dumps(config.__dict__), str(out)],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=code,
            )
        except subprocess.TimeoutExpired:
            return Record.failed(config, f"timeout after {timeout:.0f}s", time.perf_counter() - start)
        if out.exists():
            return Record.from_dict(json.loads(out.read_text()))
        tail = " / ".join(proc.stderr.strip().splitlines()[-3:])[:600]
        return Record.failed(config, f"worker exited {proc.returncode}: {tail}", time.perf_counter() - start)


def _fmt_duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s" if hours else f"{rest // 60}m{rest % 60:02d}s"


def execute(
    plan: Plan,
    done: dict[tuple, Record],
    sink: Callable[[Record], None],
    worker: Callable[..., Record] = run_worker,
) -> list[Record]:
    """Run what is not in ``done``, ``plan.jobs`` at a time, printing progress and ETA.

    Returns every record of ``done`` (a resumed run may add systems or models to an
    earlier one) and the new ones.
    """
    todo = [c for c in plan.configs if _key(c) not in done]
    records = list(done.values())
    if records:
        progress(f"resuming: {len(records)} configurations already measured")
    start = time.perf_counter()
    finished = 0
    # Configurations with a byte budget wait for the ones they take it from.
    phases = [
        [c for c in todo if not SYSTEMS[c.system].by_bytes],
        [c for c in todo if SYSTEMS[c.system].by_bytes],
    ]
    with concurrent.futures.ThreadPoolExecutor(max_workers=plan.jobs) as pool:
        for phase in phases:
            futures = {}
            for config in phase:
                resolved = _resolve(config, done)
                if isinstance(resolved, str):
                    futures[pool.submit(Record.failed, config, resolved)] = config
                else:
                    futures[pool.submit(worker, resolved, plan.timeout)] = resolved
            for future in concurrent.futures.as_completed(futures):
                record = future.result()
                done[_key(record)] = record
                records.append(record)
                sink(record)
                finished += 1
                elapsed = time.perf_counter() - start
                eta = elapsed / finished * (len(todo) - finished)
                status = "ok" if record.ok else "ERROR"
                if record.ok and record.wrong:
                    status = f"WRONG grads ({record.max_grad_diff:.1e})"
                progress(
                    f"[{finished:3d}/{len(todo)}] {futures[future].label():52s} {status:24s}"
                    f" {record.wall_seconds or 0.0:6.1f}s | elapsed {_fmt_duration(elapsed)}"
                    f" ETA {_fmt_duration(eta)}"
                )
                if not record.ok:
                    progress(f"      {record.error}")
    return records


def write_records(out: Path, records: list[Record], meta: dict[str, object]) -> None:
    data = {"meta": meta, "records": [r.to_dict() for r in records]}
    (out / "records.json").write_text(json.dumps(data, indent=1))
    with open(out / "records.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for record in records:
            writer.writerow({k: ("" if v is None else v) for k, v in record.to_dict().items()})


def read_jsonl(path: Path) -> list[Record]:
    if not path.exists():
        return []
    return [Record.from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def run_solve_time(
    out: Path, layers: int, quick: bool, timeout: float, code: Path = ROOT
) -> list[dict[str, object]] | str:
    """``benchmarks.solve_time`` in a process of its own (in ``code``), its rows."""
    progress(f"solve time: {layers}-layer nanoGPT joint graph ...")
    start = time.perf_counter()
    target = out.resolve() / "solve_time"  # its JSON and table
    args = [sys.executable, "-m", "benchmarks.solve_time", "--layers", str(layers), "--out", str(target)]
    if quick:
        args.append("--quick")
    env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1", "PYTHONWARNINGS": "ignore"}
    try:
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, cwd=code)
    except subprocess.TimeoutExpired:
        return f"timeout after {timeout:.0f}s"
    if proc.returncode != 0 or not (target / "solve_time.json").exists():
        return "failed: " + " / ".join(proc.stderr.strip().splitlines()[-3:])
    progress(f"solve time: done in {time.perf_counter() - start:.0f}s")
    return json.loads((target / "solve_time.json").read_text())["rows"]


def _merge_resumed(out: Path, meta: dict[str, object]) -> dict[str, object]:
    """A resumed run's metadata: the first run's command and start, wall times added up."""
    previous_file = out / "records.json"
    if not previous_file.exists():
        return meta
    previous = json.loads(previous_file.read_text())["meta"]
    return {
        **meta,
        "command": f"{previous['command']}; then {meta['command']}",
        "started": previous["started"],
        "wall_seconds": round(float(previous["wall_seconds"]) + float(meta["wall_seconds"]), 1),  # type: ignore[arg-type]
        "load_average_before": previous["load_average_before"],
        "solve_time": meta["solve_time"] or previous.get("solve_time"),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    made = parser("benchmarks.frontier", __doc__, out=None)
    made.add_argument("--quick", action="store_true", help="small models, 3 budgets, no codegen, < 5 min")
    made.add_argument(
        "--models",
        nargs="+",
        help="default: all but the fine-tuning ones (HF ones if transformers is installed)",
    )
    made.add_argument(
        "--systems", nargs="+", choices=sorted(SYSTEMS), help=f"default: {' '.join(DEFAULT_SYSTEMS)}"
    )
    made.add_argument("--budgets", help="comma-separated ratios; default 0,0.1,...,1 (quick: 0,0.5,1)")
    made.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    made.add_argument("--path", choices=PATHS, help="default: inductor (quick: graphs)")
    made.add_argument("--size", choices=SIZES, help="model sizes; default full (quick: quick)")
    made.add_argument("--repeats", type=int, help="timed steps per configuration; default 10 (quick: 3)")
    made.add_argument("--jobs", type=int, help="workers at a time; default 1 (quick: 2); >1 skews step times")
    made.add_argument("--timeout", type=float, default=1200.0, help="seconds per configuration")
    made.add_argument("--solve-time-layers", type=int, default=12, help="0 skips the solve-time measurement")
    made.add_argument(
        "--resume", action="store_true", help="keep the records in OUT (records.jsonl or records.json)"
    )
    made.add_argument("--report-only", action="store_true", help="rebuild tables and plots from OUT")
    return made.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Default ``--out``: ``benchmarks/frontier/results/PATH`` (quick: ``benchmarks/out/quick``,
    not committed)."""
    args = parse_args(argv)
    quick = args.quick
    path = args.path or ("graphs" if quick else "inductor")
    out: Path = (
        args.out or ROOT / ("benchmarks/out/quick" if quick else f"benchmarks/frontier/results/{path}")
    ).resolve()
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "records.jsonl"
    if args.report_only:
        data = json.loads((out / "records.json").read_text())
        records = [Record.from_dict(r) for r in data["records"]]
        write_report(out, records, data["meta"])
        progress(f"wrote {out}/RESULTS.md and plots")
        return 0

    available = bench_cases(args.size or ("quick" if quick else "full"))
    # Fine-tuning recipes (LoRA, frozen layers) only by name: ``benchmarks.finetune`` sweeps them.
    defaults = [m for m, case in available.items() if not case.finetune]
    models = args.models or [m for m in defaults if not quick or m in QUICK_MODELS]
    unknown = sorted(set(models) - set(available))
    if unknown:
        progress(f"unknown or unavailable models {unknown}; available: {sorted(available)}")
        return 2
    budgets = (
        tuple(float(b) for b in args.budgets.split(","))
        if args.budgets
        else QUICK_BUDGETS
        if quick
        else FULL_BUDGETS
    )
    configs = plan_configs(
        models,
        args.systems or (QUICK_SYSTEMS if quick else DEFAULT_SYSTEMS),
        budgets,
        path=path,
        device=args.device,
        size=args.size or ("quick" if quick else "full"),
        repeats=args.repeats or (3 if quick else 10),
    )
    plan = Plan(tuple(configs), args.jobs or (2 if quick else 1), args.timeout)
    run = command("benchmarks.frontier", argv)
    progress(f"{len(configs)} configurations, {plan.jobs} at a time -> {out}")
    if args.resume and not jsonl.exists() and (out / "records.json").exists():
        previous = json.loads((out / "records.json").read_text())["records"]
        jsonl.write_text("".join(json.dumps(r) + "\n" for r in previous))
    done = {_key(r): r for r in read_jsonl(jsonl) if r.ok} if args.resume else {}
    if not args.resume:
        jsonl.write_text("")
    start = time.perf_counter()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    load_before = load_average()

    def sink(record: Record) -> None:
        with open(jsonl, "a") as f:
            f.write(json.dumps(record.to_dict()) + "\n")

    code = snapshot_code()
    try:
        records = execute(plan, done, sink, functools.partial(run_worker, code=code))
        solve_time = (
            run_solve_time(out, args.solve_time_layers, quick, args.timeout, code)
            if args.solve_time_layers
            else None
        )
    finally:
        shutil.rmtree(code, ignore_errors=True)
    meta = {
        "command": run,
        "quick": quick,
        "started": started,
        "wall_seconds": round(time.perf_counter() - start, 1),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "jobs": plan.jobs,
        "budgets": list(budgets),
        "machine": machine(),
        "code": {**git_state(), "code_hashes": sorted({r.code_hash for r in records if r.code_hash})},
        "solve_time": solve_time,
    }
    if args.resume:
        meta = _merge_resumed(out, meta)
    write_records(out, records, meta)
    write_report(out, records, meta)
    failed = sum(not r.ok for r in records)
    progress(
        f"done in {_fmt_duration(time.perf_counter() - start)}: {len(records)} records,"
        f" {failed} failed -> {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
