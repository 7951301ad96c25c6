"""FSDP2 on a process group: per-rank memory, step time and gradients of torch.compile,
PyTorch's budget partitioner and ours, side by side.

    python -m benchmarks.distributed [--world 2] [--device cpu|cuda] [--models llama]
        [--budgets 0,0.5,1] [--path graphs|inductor] [--size full] [--repeats N] [--timeout S]
        [--out benchmarks/distributed/results] [--report-only]

torchtitan's layout: every block compiled (``module.compile``) and sharded with
``fully_shard``, then the root sharded; embeddings, final norm, head and loss run eagerly.
Each configuration runs in a fresh group of ``--world`` processes (``benchmarks.harness.ranks``:
gloo on CPU, NCCL with one GPU per rank on CUDA). Each rank measures its own step, the
way ``benchmarks.frontier.worker`` does in one process: bytes its compiled graphs save for backward
(``RecordingPartitioner``, the same count for every partitioner), bytes the forward left
allocated, peak of the step (CPU: profiler allocation events; CUDA: max_memory_allocated),
median step time, and its gradients (shards gathered) against one eager single-process step
on the global batch (the ranks' local batches concatenated; the loss is a mean).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks.harness import ranks, tables
from benchmarks.harness.cases import SIZES, bench_cases
from benchmarks.harness.machine import load_average, machine
from benchmarks.harness.meters import step_memory
from benchmarks.harness.partition_stats import RecordingPartitioner
from benchmarks.harness.records import GRAD_TOLERANCE
from benchmarks.harness.snapshot import ROOT, git_state
from benchmarks.harness.study import command, parser, progress
from benchmarks.harness.systems import PATHS, PYTORCH_DEFAULT_BUDGET, SYSTEMS, make_backend
from benchmarks.harness.training import benchmark_settings, grads_of, profile_name, relative_grad_diff, sync
from recompute_pass import capture_reports

SYSTEM_NAMES = ("compile", "compile_budget", "recompute")
BUDGETS = (0.0, 0.5, 1.0)
DEFAULT_MODELS = ("llama",)  # no dropout: each rank draws its own masks, unlike one process


@dataclass(frozen=True)
class DistConfig:
    model: str
    system: str
    budget: float | None
    world: int
    device: str
    path: str
    size: str
    repeats: int
    seed: int = 0

    def label(self) -> str:
        budget = "" if self.budget is None else f" b={self.budget:.1f}"
        return f"{self.model} {self.system}{budget} x{self.world}"


@dataclass(frozen=True)
class RankRecord:
    """One rank's measurement of one configuration (``error`` set: not measured)."""

    model: str
    system: str
    budget: float | None
    rank: int
    world: int
    device: str
    path: str
    error: str | None = None
    graphs: int | None = None
    saved_bytes: int | None = None  # compiled graphs' outputs for backward, inputs included
    report_saved_bytes: int | None = None  # ours: the reports' sum (their units, same count)
    recompute_flops: int | None = None  # backward nodes that repeat forward ones, all graphs
    recompute_heavy_flops: int | None = None  # GEMM, convolution, attention among them
    after_forward_bytes: int | None = None  # allocator: left by the forward, loss excluded
    peak_bytes: int | None = None
    step_seconds: float | None = None  # median
    step_seconds_iqr: float | None = None
    step_seconds_min: float | None = None  # the least disturbed step on a shared machine
    step_cpu_seconds: float | None = None  # median process CPU time: other load barely moves it
    max_grad_diff: float | None = None  # relative to max |single-process grad|
    grads_ok: bool | None = None
    plan_digests: tuple[str, ...] = ()  # ours: one per graph


def configs(models: Sequence[str], budgets: Sequence[float], **common: Any) -> list[DistConfig]:
    out = []
    for model in models:
        for name in SYSTEM_NAMES:
            system = SYSTEMS[name]
            for budget in budgets if system.budgeted else (None,):
                if system.pytorch_budget and budget == PYTORCH_DEFAULT_BUDGET:
                    continue  # that is plain torch.compile, measured once
                out.append(DistConfig(model, name, budget, **common))
    return out


def _fully_shard(model: nn.Module, blocks: list[nn.Module], backend: Any) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    for block in blocks:
        block.compile(backend=backend)
        fully_shard(block)
    fully_shard(model)
    return model


def measure_rank(rank: int, world: int, config: dict[str, Any]) -> dict[str, Any]:
    """One rank's step (runs in the spawned process)."""
    cfg = DistConfig(**config)
    device = torch.device("cuda", rank) if cfg.device == "cuda" else torch.device("cpu")
    with benchmark_settings():
        torch._dynamo.reset()
        case = bench_cases(cfg.size)[cfg.model]
        torch.manual_seed(cfg.seed)
        model = case.build().to(device).train()
        batches = []
        for r in range(world):
            torch.manual_seed(cfg.seed + 1 + r)
            batches.append(tuple(t.to(device) for t in case.inputs()))
        reference = copy.deepcopy(model)
        reference(*(torch.cat(parts) for parts in zip(*batches, strict=True))).backward()
        expected = grads_of(reference)
        del reference

        system = SYSTEMS[cfg.system]
        recorder = RecordingPartitioner(system.partitioner(cfg.budget, None), device=profile_name(device))
        sharded = copy.deepcopy(model)
        _fully_shard(sharded, case.blocks(sharded), make_backend(recorder, cfg.path))
        local = batches[rank]

        with capture_reports() as reports:
            sharded(*local).backward()
        sync(device)
        diff = relative_grad_diff(grads_of(sharded), expected)
        sharded.zero_grad(set_to_none=True)
        memory, loss = step_memory(lambda: sharded(*local), lambda out: out.backward(), device)
        after_forward = memory.after_forward_bytes - loss.untyped_storage().nbytes()
        times, cpu_times = [], []
        for _ in range(cfg.repeats):
            sharded.zero_grad(set_to_none=True)
            sync(device)
            start, cpu_start = time.perf_counter(), time.process_time()
            sharded(*local).backward()
            sync(device)
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
    stats = recorder.total()
    quartiles = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    record = RankRecord(
        model=cfg.model,
        system=cfg.system,
        budget=cfg.budget,
        rank=rank,
        world=world,
        device=cfg.device,
        path=cfg.path,
        graphs=stats.graphs,
        saved_bytes=stats.saved_bytes + stats.saved_input_bytes,
        report_saved_bytes=sum(r.saved_bytes or 0 for r in reports) if reports else None,
        recompute_flops=stats.recompute_flops,
        recompute_heavy_flops=stats.recompute_heavy_flops,
        after_forward_bytes=after_forward,
        peak_bytes=memory.peak_bytes,
        step_seconds=statistics.median(times),
        step_seconds_iqr=quartiles[2] - quartiles[0],
        step_seconds_min=min(times),
        step_cpu_seconds=statistics.median(cpu_times),
        max_grad_diff=diff,
        grads_ok=diff <= GRAD_TOLERANCE,
        plan_digests=tuple(r.plan_digest for r in reports),
    )
    return dataclasses.asdict(record)


def run(cfgs: Sequence[DistConfig], timeout: float) -> list[RankRecord]:
    records: list[RankRecord] = []
    for k, cfg in enumerate(cfgs, 1):
        start = time.perf_counter()
        backend = "nccl" if cfg.device == "cuda" else "gloo"
        try:
            config = dataclasses.asdict(cfg)
            results = ranks.run_ranks(
                measure_rank, world=cfg.world, backend=backend, timeout=timeout, config=config
            )
            got = [RankRecord(**{**r, "plan_digests": tuple(r["plan_digests"])}) for r in results]
            status = "ok" if all(r.grads_ok for r in got) else "WRONG grads"
        except Exception as error:
            message = str(error).strip().splitlines()[-1][:300]
            where = (cfg.world, cfg.device, cfg.path)
            got = [
                RankRecord(cfg.model, cfg.system, cfg.budget, r, *where, error=message)
                for r in range(cfg.world)
            ]
            status = f"ERROR {message}"
        records += got
        progress(f"[{k}/{len(cfgs)}] {cfg.label():32s} {status} {time.perf_counter() - start:6.1f}s")
    return records


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 20):.2f}"


def _plans(group: list[RankRecord]) -> str:
    digests = {r.plan_digests for r in group if r.error is None}
    if not any(digests):
        return "-"
    return "same" if len(digests) == 1 else "**differ**"


def results_md(records: Sequence[RankRecord], meta: dict[str, Any]) -> str:
    world = meta["world"]
    header = (
        "model",
        "system",
        "budget",
        "rank",
        "saved by graphs (MiB)",
        "recompute (GEMM/attn.)",
        "left after forward (MiB)",
        "peak (MiB)",
        "step: median ± IQR (min)",
        "CPU time / step",
        "grad diff",
        "plans across ranks",
    )
    rows = []
    groups: dict[tuple, list[RankRecord]] = {}
    for r in records:
        groups.setdefault((r.model, r.system, r.budget), []).append(r)
    for (model, system, budget), group in groups.items():
        for r in group:
            if r.error:
                rows.append((model, SYSTEMS[system].label, _budget(budget), str(r.rank), f"error: {r.error}"))
                continue
            grad = f"{r.max_grad_diff:.1e}" + ("" if r.grads_ok else " **WRONG**")
            step = (
                f"{tables.fmt_seconds(r.step_seconds)} ± {tables.fmt_seconds(r.step_seconds_iqr)}"
                f" ({tables.fmt_seconds(r.step_seconds_min)})"
            )
            rows.append(
                (
                    model,
                    SYSTEMS[system].label,
                    _budget(budget),
                    str(r.rank),
                    _mib(r.saved_bytes),
                    f"{tables.fmt_flops(r.recompute_flops)} ({tables.fmt_flops(r.recompute_heavy_flops)})",
                    _mib(r.after_forward_bytes),
                    _mib(r.peak_bytes),
                    step,
                    tables.fmt_seconds(r.step_cpu_seconds),
                    grad,
                    _plans(group),
                )
            )
    width = len(header)
    rows = [(*row, *([""] * (width - len(row)))) for row in rows]
    machine = meta["machine"]
    return "\n".join(
        [
            f"# FSDP2 on {world} ranks ({meta['backend']}, {meta['device']})",
            "",
            f"Command: `{meta['command']}` ({meta['wall_seconds']:.0f} s, {meta['started']}).",
            f"Machine: {machine['cpu']}, {machine['cpu_count']} cores, torch {machine['torch']}"
            + (f", {machine['gpu']}" if "gpu" in machine else "")
            + f"; code {meta['code']['head']}{' (uncommitted changes)' if meta['code']['dirty'] else ''}.",
            f"Path: `{meta['path']}`, size `{meta['size']}`, {meta['repeats']} timed steps per rank;"
            f" load average {meta['load_average_before']} before, {meta['load_average_after']} after.",
            "",
            "Per rank: every block compiled and sharded with `fully_shard`, then the root (the",
            "embeddings, final norm, head and loss run eagerly). **saved by graphs**: the compiled",
            "blocks' forward outputs kept for backward (activations and inputs of the local batch;",
            "parameters are static inputs, and FSDP frees their all-gathered copies after forward).",
            "**left after forward**: the allocator's bytes the forward left allocated (the eager",
            "parts' saved tensors too), **peak**: the step's highest level above its start",
            "(CPU: profiler allocation events, all-gather buffers included; CUDA:",
            "`max_memory_allocated`). **grad diff**: against one eager single-process step on the",
            "global batch, relative to the largest gradient. **plans**: our reports' `plan_digest`",
            "on every rank. **step**: wall-clock forward+backward; **CPU time / step**: the rank",
            "process's CPU time for it (one thread per rank on CPU). On a machine shared with other",
            "jobs (see the load average) wall times move by 2x between runs; CPU time is steadier.",
            "On the `graphs` path the kernels are eager ones, unfused: recomputed pointwise ops",
            "cost more than under Inductor.",
            "",
            tables.markdown(header, rows),
            "",
        ]
    )


def _budget(budget: float | None) -> str:
    return "-" if budget is None else f"{budget:g}"


def main(argv: Sequence[str] | None = None) -> int:
    made = parser("benchmarks.distributed", __doc__, out=ROOT / "benchmarks/distributed/results")
    made.add_argument("--world", type=int, default=2, help="ranks")
    made.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    made.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    made.add_argument("--budgets", help="comma-separated ratios; default 0,0.5,1")
    made.add_argument("--path", choices=PATHS, help="default: graphs on CPU, inductor on CUDA")
    made.add_argument("--size", choices=SIZES, default="full")
    made.add_argument("--repeats", type=int, default=10, help="timed steps per rank")
    made.add_argument("--timeout", type=float, default=1200.0, help="seconds per configuration")
    made.add_argument("--report-only", action="store_true", help="rebuild RESULTS.md from OUT/records.json")
    args = made.parse_args(argv)
    out = args.out.resolve()
    if args.report_only:
        report_only(out)
        return 0
    device = args.device
    path = args.path or ("inductor" if device == "cuda" else "graphs")
    budgets = tuple(float(b) for b in args.budgets.split(",")) if args.budgets else BUDGETS
    common = dict(world=args.world, device=device, path=path, size=args.size, repeats=args.repeats)
    cfgs = configs(args.models, budgets, **common)
    out.mkdir(parents=True, exist_ok=True)
    progress(f"{len(cfgs)} configurations on {args.world} ranks -> {out}")
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    load_before = load_average()
    start = time.perf_counter()
    records = run(cfgs, args.timeout)
    meta = {
        "command": command("benchmarks.distributed", argv),
        "started": started,
        "wall_seconds": round(time.perf_counter() - start, 1),
        "world": args.world,
        "backend": "nccl" if device == "cuda" else "gloo",
        "device": device,
        "path": path,
        "size": args.size,
        "repeats": args.repeats,
        "budgets": list(budgets),
        "machine": machine(),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "code": git_state(),
    }
    data = {"meta": meta, "records": [dataclasses.asdict(r) for r in records]}
    (out / "records.json").write_text(json.dumps(data, indent=1))
    (out / "RESULTS.md").write_text(results_md(records, meta))
    failed = sum(r.error is not None for r in records)
    progress(f"done: {len(records)} rank records, {failed} failed -> {out}/RESULTS.md")
    return 0


def report_only(out: Path) -> None:
    """Rebuild RESULTS.md from ``out/records.json``."""
    data = json.loads((out / "records.json").read_text())
    records = [RankRecord(**{**r, "plan_digests": tuple(r["plan_digests"])}) for r in data["records"]]
    (out / "RESULTS.md").write_text(results_md(records, data["meta"]))
