"""RESULTS.md and the plots, from the records and the run's metadata."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness import tables
from benchmarks.harness.analysis import compare_frontier, megatron_point, models_of, step_flops, targets
from benchmarks.harness.cases import bench_cases
from benchmarks.harness.plots import plot_model
from benchmarks.harness.records import Record

METHOD = """\
How each number is obtained (`benchmarks/`):
- **saved (run)**: bytes of the storages autograd holds for backward after the forward,
  parameters, buffers and inputs excluded, walked from the loss's `grad_fn`
  (`meters.saved_activation_bytes`); for eager + checkpoint (marked `*`) walking would
  trigger the recomputation, so it is the allocator's net bytes left by the forward minus
  the loss (the two methods agree to the byte on every other system; both are in the CSV).
- **held**: saved (run) plus the user inputs (token ids, labels) the graphs hand to
  backward: our budget's units, used to compare plans (one plan saves the labels, another
  a copy of them; the run-time walk sees only the copy).
- **saved (graph)**: the same, counted on the partitioned forward graph's outputs with the
  cost model (`partition_stats.RecordingPartitioner`, one wrapper around every partitioner).
- **recompute**: FLOPs of backward nodes that are also forward nodes of the partitioned
  graphs, by `cost_model.node_cost` (CPU flash attention counted; pointwise ops 1 FLOP per
  element). Eager + checkpoint: the blocks' forward FLOPs, same counter on a `make_fx` trace.
  **% step**: of the `torch.compile` step's forward+backward FLOPs without recompute.
- **est. recompute**: our cost model's roofline time for those nodes (pointwise fused).
- **peak**: whole forward+backward, above the level at its start (CPU: profiler allocation
  events summed in time order; CUDA: `torch.cuda.max_memory_allocated`).
- **step**: median and interquartile range of the timed steps, and the fastest (on a shared
  machine the minimum is the least disturbed figure); **compile**: first step minus median;
  **partition**: wall time of the partitioner call(s).
- **grad diff**: every system's gradients against eager's from the same weights, inputs and
  seed; compiled systems use `torch._inductor.config.fallback_random=True` so dropout draws
  eager's masks. {tolerance}
- Each configuration runs in a fresh process, Inductor/AOTAutograd caches off.
"""


def write_report(out: Path, records: Sequence[Record], meta: dict[str, object]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    machine = meta.get("machine", {})
    assert isinstance(machine, dict)
    paths = sorted({r.path for r in records})
    solve_time = meta.get("solve_time")
    lines = [
        "# torch-recompute benchmark results",
        "",
        f"Command: `{meta.get('command')}`  ",
        f"Machine: {machine.get('cpu')}, {machine.get('cpu_count')} cores"
        + (f", GPU {machine['gpu']}" if "gpu" in machine else "")
        + f"; torch {machine.get('torch')}"
        + (f", transformers {machine['transformers']}" if "transformers" in machine else "")
        + "  ",
        f"Started {meta.get('started')}, wall time {float(meta.get('wall_seconds') or 0) / 60:.1f} min,"
        f" {meta.get('jobs')} worker(s) at a time; load average before/after"
        f" {meta.get('load_average_before')} / {meta.get('load_average_after')}  ",
        _code_line(meta),
        f"Path: {', '.join(paths)} ("
        + (
            "Inductor codegen"
            if paths == ["inductor"]
            else "partitioned graphs run without codegen; step times "
            "and peaks are of eager kernels, partition metrics are those of the partitioner"
        )
        + f"); device {', '.join(sorted({r.device for r in records}))}",
        "",
        "## Targets",
        "",
        tables.targets_table(targets(records, solve_time)),
        "",
    ]
    if isinstance(solve_time, list) and solve_time:
        lines += [
            "## Solve time (12-layer nanoGPT joint graph, no codegen)",
            "",
            tables.solve_time_table(solve_time),
            "",
        ]
    point = megatron_point(records)
    if point is not None:
        lines += [
            "## Megatron-LM point (nanoGPT)",
            "",
            "Selective recompute saves GEMM and attention outputs and recomputes softmax, dropout"
            " and pointwise ops. Where does our budgeted frontier reach the bytes it saves, and for"
            " how many FLOPs?",
            "",
            tables.megatron_table(point),
            "",
        ]
    descriptions = {
        name: case.description for name, case in bench_cases(records[0].size if records else "full").items()
    }
    for model in models_of(records):
        total = step_flops(records, model)
        plot = plot_model(records, model, total, out)
        lines += [
            f"## {model}: {descriptions.get(model, '')}",
            "",
            f"Step FLOPs (forward+backward, no recompute): {tables.fmt_flops(total)}",
            "",
            f"![{model}]({plot.name})",
            "",
            tables.model_table(records, model, total),
            "",
        ]
        frontier = compare_frontier(records, model)
        if frontier:
            lines += [
                "Each PyTorch budget point against ours at its bytes, and against the cheapest valid plan"
                " of ours holding no more bytes (within 0.1%). Where ours recomputes more, the"
                " verdict says whether the excess is pointwise only (GEMM, convolution and attention"
                " FLOPs no higher: the cost model prices a pointwise op fused into a backward kernel"
                " below the memory traffic of saving its output), or whether our plan is cheaper by"
                " the cost model's estimated recompute time (our objective; memory-bound ops are"
                " priced by bytes moved, not FLOPs).",
                "",
                tables.frontier_table(frontier, total),
                "",
            ]
    failed = [r for r in records if not r.ok]
    if failed:
        lines += ["## Failed configurations", ""]
        lines += [f"- {r.model} / {r.system} / budget {r.budget}: {r.error}" for r in failed]
        lines.append("")
    lines += ["## Method", "", METHOD.format(tolerance=tables.TOLERANCE_NOTE)]
    path = out / "RESULTS.md"
    path.write_text("\n".join(lines))
    return path


def _code_line(meta: dict[str, object]) -> str:
    code = meta.get("code")
    if not isinstance(code, dict):
        return "Code: not recorded  "
    hashes = code.get("code_hashes") or []
    state = f"commit {code.get('head')}" + (" + uncommitted changes" if code.get("dirty") else "")
    if len(hashes) > 1:  # type: ignore[arg-type]
        return f"Code: {state}; **{len(hashes)} different code versions measured** ({', '.join(hashes)})  "  # type: ignore[arg-type]
    return f"Code: {state}, code hash {', '.join(hashes) or '-'}  "  # type: ignore[arg-type]
