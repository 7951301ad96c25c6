"""Markdown tables of the records (RESULTS.md)."""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.harness.analysis import FrontierRow, MegatronPoint, Target, held, of, pct
from benchmarks.harness.records import GRAD_TOLERANCE, Record
from benchmarks.harness.systems import SYSTEMS

ORDER = (
    "eager",
    "checkpoint",
    "compile",
    "recompute_no_recompute",
    "recompute_selective",
    "recompute_at_selective",
    "recompute_recompute_all",
    "recompute_sqrt_n",
)
BUDGETED = ("compile_budget", "recompute", "recompute_peak", "recompute_at_pytorch", "recompute_mincut")


def peak_cells(row: dict[str, object]) -> tuple[str, str, str]:
    """A study row's budget, predicted peak and error as table cells (empty where absent)."""
    budget, predicted, error = row["budget"], row["predicted_peak"], row["error"]
    return (
        "" if budget is None else f"{budget:g}",
        "" if predicted is None else f"{predicted:,}",
        "" if error is None else f"{error:+.2%}",
    )


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    if abs(n) >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    return f"{n / 1024:.1f} KiB"


def fmt_flops(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e9:.3f} G" if abs(n) >= 1e9 else f"{n / 1e6:.2f} M"


def fmt_pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}%"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def fmt_grad(record: Record) -> str:
    if record.max_grad_diff is None:
        return "-"
    text = f"{record.max_grad_diff:.1e}"
    return f"**WRONG** {text}" if record.wrong else text


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def ordered(records: Sequence[Record], model: str) -> list[Record]:
    """Budget-independent systems first, then each budget with its systems side by side."""
    rows = [r for name in ORDER for r in of(records, model, name)]
    budgeted = [r for name in BUDGETED for r in of(records, model, name)]
    return rows + sorted(budgeted, key=lambda r: (r.budget, BUDGETED.index(r.system)))


def model_table(records: Sequence[Record], model: str, step_flops: int | None) -> str:
    header = (
        "system",
        "budget",
        "saved (run)",
        "saved (graph)",
        "recompute",
        "% step",
        "est. recompute",
        "peak",
        "predicted peak",
        "step: median ± IQR (min)",
        "compile",
        "partition",
        "grad diff",
    )
    rows = []
    for r in ordered(records, model):
        label = SYSTEMS[r.system].label
        budget = "-" if r.budget is None else f"{r.budget:.1f}"
        if r.budget_bytes is not None:
            budget = fmt_bytes(r.budget_bytes)
        if not r.ok:
            rows.append((label, budget, f"ERROR: {(r.error or '')[:120]}", *("",) * 10))
            continue
        saved = fmt_bytes(r.saved_bytes) + ("*" if r.saved_bytes_method == "allocator" else "")
        step = (
            "-"
            if r.step_seconds is None
            else f"{fmt_seconds(r.step_seconds)} ± {fmt_seconds(r.step_seconds_iqr)}"
            f" ({fmt_seconds(r.step_seconds_min)})"
        )
        rows.append(
            (
                label,
                budget,
                saved,
                fmt_bytes(r.graph_saved_bytes),
                fmt_flops(r.recompute_flops),
                fmt_pct(pct(r.recompute_flops, step_flops)),
                fmt_seconds(r.est_recompute_seconds),
                fmt_bytes(r.peak_bytes),
                _fmt_prediction(r.report_predicted_peak_bytes, r.peak_bytes),
                step,
                fmt_seconds(r.compile_seconds),
                fmt_seconds(r.partition_seconds),
                fmt_grad(r),
            )
        )
    return markdown(header, rows)


def _fmt_prediction(predicted: int | None, measured: int | None) -> str:
    """The predicted peak and its error against the measured one."""
    if predicted is None:
        return "-"
    if not measured:
        return fmt_bytes(predicted)
    return f"{fmt_bytes(predicted)} ({100 * (predicted / measured - 1):+.1f}%)"


def frontier_table(rows: Sequence[FrontierRow], step_flops: int | None) -> str:
    header = (
        "PyTorch budget",
        "PyTorch held",
        "PyTorch recompute",
        "ours @ PyTorch's bytes: held",
        "recompute",
        "best of ours holding <= PyTorch's bytes",
        "verdict",
    )
    verdicts = {
        "met": "ours <= PyTorch",
        # In FLOPs, at <= PyTorch's bytes (within 0.1%):
        "pointwise": "ours > PyTorch in pointwise FLOPs only (fused recompute instead of saving)",
        "est. time": "ours > PyTorch in FLOPs, < in estimated recompute time (see est. recompute)",
        "missed": "**ours > PyTorch**",
        "no plan": "**no plan of ours saves that little**",
        "pytorch wrong": "PyTorch's plan has **wrong gradients**",
    }

    def flops(record: Record) -> str:
        return f"{fmt_flops(record.recompute_flops)} ({fmt_pct(pct(record.recompute_flops, step_flops), 2)})"

    body = []
    for row in rows:
        theirs, matched, best = row.pytorch, row.matched, row.ours
        if best is None:
            best_text = "-"
        else:
            where = SYSTEMS[best.system].label if best.budget is None else f"b={best.budget:.1f}"
            if best.system == "recompute_at_pytorch":
                where = f"@ PyTorch b={best.budget:.1f}"
            best_text = f"{fmt_bytes(held(best))}, {flops(best)} ({where})"
        body.append(
            (
                f"{row.budget:.1f}",
                fmt_bytes(held(theirs)),
                flops(theirs),
                "-" if matched is None or not matched.ok else fmt_bytes(held(matched)),
                "-" if matched is None or not matched.ok else flops(matched),
                best_text,
                verdicts[row.verdict],
            )
        )
    return markdown(header, body)


def targets_table(targets: Sequence[Target]) -> str:
    status = {True: "met", False: "**not met**", None: "not measured"}
    return markdown(("target", "status", "detail"), [(t.name, status[t.met], t.detail) for t in targets])


def megatron_table(point: MegatronPoint) -> str:
    rows = []
    for name, record in (
        ("selective (GEMM/attention outputs saved)", point.selective),
        ("ours, absolute budget = selective's bytes", point.at_bytes),
        ("ours, cheapest sweep point at <= those bytes", point.frontier),
    ):
        if record is None:
            rows.append((name, "-", "-", "-", "-"))
            continue
        budget = "-" if record.budget is None else f"{record.budget:.1f}"
        rows.append(
            (
                name,
                budget,
                fmt_bytes(held(record)),
                fmt_flops(record.recompute_flops),
                fmt_pct(point.pct(record)),
            )
        )
    return markdown(("plan", "budget", "held", "recompute", "% of step FLOPs"), rows)


def solve_time_table(solve_time: list[dict[str, object]]) -> str:
    rows = [
        (
            f"{s['budget']}",
            f"{s['joint_nodes']}",
            fmt_seconds(s["solve_seconds"]),  # type: ignore[arg-type]
            "yes" if s["optimal"] else "no",
            fmt_seconds(s["partition_seconds"]),  # type: ignore[arg-type]
            fmt_seconds(s["pytorch_partition_seconds"]),  # type: ignore[arg-type]
        )
        for s in solve_time
    ]
    header = (
        "budget",
        "joint nodes",
        "our solve",
        "optimal",
        "our partitioner call",
        "PyTorch partitioner call",
    )
    return markdown(header, rows)


TOLERANCE_NOTE = (
    f"grad diff: max |grad - eager grad| / max |eager grad|; above {GRAD_TOLERANCE:g} is **WRONG**."
)
