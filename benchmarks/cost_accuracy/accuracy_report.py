"""Tables, targets and the scatter plot of ``benchmarks.cost_accuracy``."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from benchmarks.cost_accuracy.accuracy_records import (
    MEASURED,
    OVERHEAD_FLOOR,
    ROOFLINE,
    TARGET_ERROR,
    FusionRecord,
    OpError,
    PlanRecord,
    ProfilingTime,
)
from benchmarks.harness.plots import plt, save

MIB = float(1 << 20)
SAME_WITHIN = 0.01  # a paired step-time difference under 1% of the step is no difference
NOISE_SE = 2.0  # ... nor one within this many standard errors of its median
COLORS = {ROOFLINE: "tab:orange", MEASURED: "tab:blue"}


def base_step(plans: Sequence[PlanRecord], record: PlanRecord) -> float:
    """The step time of the same cost model's budget-1.0 plan (what overhead is relative to)."""
    return next(
        p.step_seconds
        for p in plans
        if p.model == record.model and p.costs == record.costs and p.budget == 1.0 and not p.at_bytes
    )


def overhead_points(plans: Sequence[PlanRecord]) -> list[PlanRecord]:
    """Budgeted plans below 1.0 (the budget-1.0 plan is the reference), ratio budgets only."""
    return [p for p in plans if not p.at_bytes and p.budget < 1.0 and p.delta is not None]


def relative_error(record: PlanRecord) -> float | None:
    if record.delta is None or record.est_delta is None or record.delta <= 0:
        return None
    return record.est_delta / record.delta - 1.0


def eligible(plans: Sequence[PlanRecord], record: PlanRecord) -> bool:
    """Measured overhead at least ``OVERHEAD_FLOOR`` of the step (the target's domain)."""
    return record.delta is not None and record.delta >= OVERHEAD_FLOOR * base_step(plans, record)


def median_se(iqr: float | None, rounds: int) -> float:
    """Standard error of a median of ``rounds`` samples whose IQR is ``iqr`` (normal approx.:
    sigma = IQR / 1.349, SE = 1.2533 sigma / sqrt(n))."""
    return 0.0 if iqr is None else 1.2533 * iqr / 1.349 / math.sqrt(rounds)


def verdict(plans: Sequence[PlanRecord], record: PlanRecord, rounds: int) -> str:
    """Measured costs at the roofline plan's bytes against the roofline plan: faster or
    slower only beyond 1% of the step and ``NOISE_SE`` standard errors."""
    roofline = next(
        p for p in plans if p.model == record.model and p.costs == ROOFLINE and p.budget == record.budget
    )
    if record.plan == roofline.plan:
        return "same plan"
    assert record.vs_roofline is not None
    noise = max(SAME_WITHIN * roofline.step_seconds, NOISE_SE * median_se(record.vs_roofline_iqr, rounds))
    if abs(record.vs_roofline) <= noise:
        return "equal (within noise)"
    return "faster" if record.vs_roofline < 0 else "slower"


def plot(plans: Sequence[PlanRecord], errors: Sequence[OpError], out: Path) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5))
    points = overhead_points(plans)
    top = max(
        [1e-3, *(abs(p.delta or 0) * 1e3 for p in points), *(abs(p.est_delta or 0) * 1e3 for p in points)]
    )
    left.plot([0, top], [0, top], color="gray", lw=0.8, ls="--", label="estimate = measured")
    left.fill_between([0, top], [0, 0.8 * top], [0, 1.2 * top], color="gray", alpha=0.12, label="within 20%")
    for costs, color in COLORS.items():
        for filled in (True, False):
            mine = [p for p in points if p.costs == costs and eligible(plans, p) == filled]
            left.scatter(
                [p.delta * 1e3 for p in mine],  # type: ignore[operator]
                [p.est_delta * 1e3 for p in mine],  # type: ignore[operator]
                color=color if filled else "none",
                edgecolors=color,
                label=f"{costs} costs" + ("" if filled else " (overhead < 5% of step)"),
            )
    left.set_xlabel("measured step-time difference from budget 1.0 (ms)")
    left.set_ylabel("estimated step overhead difference (ms)")
    left.set_title("Step overhead: estimate against the clock")
    left.legend(fontsize=8)
    for costs, key, color in (
        (ROOFLINE, "roofline_seconds", COLORS[ROOFLINE]),
        (MEASURED, "measured_seconds", COLORS[MEASURED]),
    ):
        right.scatter(
            [e.in_step_seconds * 1e6 for e in errors],
            [getattr(e, key) * 1e6 for e in errors],
            color=color,
            s=12,
            alpha=0.7,
            label=f"{costs} (per op)",
        )
    values = [v for e in errors for v in (e.in_step_seconds, e.roofline_seconds, e.measured_seconds) if v > 0]
    if values:
        lo, hi = min(values) * 1e6 / 2, max(values) * 1e6 * 2
        right.plot([lo, hi], [lo, hi], color="gray", lw=0.8, ls="--")
        right.set_xscale("log")
        right.set_yscale("log")
    right.set_xlabel("time inside a step (us)")
    right.set_ylabel("estimated kernel time (us)")
    right.set_title("Per op: estimate against the in-step time")
    right.legend(fontsize=8)
    return save(fig, out, dpi=110)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.0f}%"


def _weighted_error(errors: Sequence[OpError], key: str) -> float:
    """Sum of |estimate - in-step| over the sum of in-step times: how wrong the total is."""
    truth = sum(e.in_step_seconds for e in errors)
    return sum(abs(getattr(e, key) - e.in_step_seconds) for e in errors) / truth if truth else float("nan")


def _median_ratio(errors: Sequence[OpError], key: str) -> float:
    return statistics.median(getattr(e, key) / e.in_step_seconds for e in errors if e.in_step_seconds > 0)


def targets(plans: Sequence[PlanRecord], timing: ProfilingTime, rounds: int) -> list[tuple[str, str, str]]:
    rows = []
    points = [p for p in overhead_points(plans) if p.costs == MEASURED]
    domain = [p for p in points if eligible(plans, p)]
    met = [p for p in domain if (e := relative_error(p)) is not None and abs(e) <= TARGET_ERROR]
    roofline = {
        (p.model, p.budget): p for p in overhead_points(plans) if p.costs == ROOFLINE and eligible(plans, p)
    }
    roof_errs = [abs(e) for p in roofline.values() if (e := relative_error(p)) is not None]
    meas_errs = [abs(e) for p in domain if (e := relative_error(p)) is not None]
    # A miss whose estimate lies within the measurement's own noise says little either way.
    within_noise = [
        p
        for p in domain
        if p not in met
        and abs((p.est_delta or 0) - (p.delta or 0)) <= NOISE_SE * median_se(p.delta_iqr, rounds)
    ]
    detail = (
        f"{len(met)} of {len(domain)} points with measured overhead >= 5% of the step within 20% "
        f"(median |error| {statistics.median(meas_errs) * 100:.0f}%); roofline: median |error| "
        f"{statistics.median(roof_errs) * 100:.0f}% over its {len(roof_errs)} such points; "
        f"{len(within_noise)} of the misses are within 2 standard errors of the measured median"
        if domain and roof_errs
        else f"{len(met)} of {len(domain)} points"
    )
    rows.append(
        (
            "Measured-cost estimate of step overhead within 20% of measured (where >= 5% of step)",
            "met" if domain and len(met) == len(domain) else "**not met**",
            detail,
        )
    )
    at_bytes = [p for p in plans if p.at_bytes]
    verdicts = [(p, verdict(plans, p, rounds)) for p in at_bytes]
    slower = [f"{p.model} b={p.budget:g}" for p, v in verdicts if v == "slower"]
    faster = [f"{p.model} b={p.budget:g}" for p, v in verdicts if v == "faster"]
    rows.append(
        (
            "Measured-cost plans no slower than roofline plans at equal saved bytes; faster on at least one",
            "met" if not slower and faster else "**not met**",
            f"{len(verdicts)} comparisons: {len(faster)} faster ({', '.join(faster) or 'none'}), "
            f"{len(slower)} slower ({', '.join(slower) or 'none'}), "
            f"{sum(v == 'same plan' for _, v in verdicts)} same plan, "
            f"{sum(v.startswith('equal') for _, v in verdicts)} equal within noise",
        )
    )
    rows.append(
        (
            "Profiling a 12-layer GPT's candidates: <= 10 s cold, <= 0.1 s warm",
            "met" if timing.cold_seconds <= 10 and timing.warm_seconds <= 0.1 else "**not met**",
            f"cold {timing.cold_seconds:.2f} s ({timing.distinct_ops} distinct ops of {timing.timed_nodes} "
            f"timed nodes, calibration included), warm {timing.warm_seconds * 1e3:.0f} ms",
        )
    )
    return rows


def write_results(
    meta: dict,
    plans: Sequence[PlanRecord],
    errors: Sequence[OpError],
    fusion: Sequence[FusionRecord],
    timing: ProfilingTime,
    out: Path,
) -> Path:
    m = meta["machine"]
    lines = [
        "# Cost-model accuracy: roofline against measured costs",
        "",
        f"Command: `{meta['command']}`  ",
        f"Machine: {m['cpu']}, {m['cpu_count']} cores, torch {m['torch']}; "
        f"{meta['threads']} torch thread(s)  ",
        f"Started {meta['started']}, wall time {meta['wall_minutes']} min; load average before/after "
        f"{meta['load_average'][0]} / {meta['load_average'][1]}  ",
        f"Code: commit {meta['git']['head']}{' (uncommitted changes)' if meta['git']['dirty'] else ''}, "
        f"code hash {meta['code_hash']}  ",
        f"Models at size `{meta['size']}`, the `graphs` path (partitioned graphs run without codegen: every "
        f"op is its own eager kernel), {meta['rounds']} interleaved rounds per plan "
        f"(the fastest of {meta['per_round']} steps per round).",
        "",
        "## Targets",
        "",
        "| target | status | detail |",
        "|---|---|---|",
        *(f"| {t} | {s} | {d} |" for t, s, d in targets(plans, timing, meta["rounds"])),
        "",
        "![scatter](cost_accuracy.png)",
        "",
        "## Step overhead: estimate against the clock",
        "",
        "Per plan: the estimated step overhead (the report's objective) minus that of the same cost model's "
        "budget-1.0 plan, against the median paired step-time difference from that plan (IQR beside it). "
        "`error` = estimate / measured - 1, shown where the measured overhead is positive; `*` marks points "
        "whose measured overhead is at least 5% of the step (the target's domain). `faults` = minor page "
        "faults per step; `system` = the step's system (kernel) time minus the budget-1.0 plan's: time "
        "outside any op, which the cost model does not price. On CPU a step faults in fresh pages for "
        "the memory it holds beyond what the allocator kept from the step before (glibc hands freed "
        "memory back to the OS), so saving more costs system time.",
        "",
        "| model | budget | costs | saved | est. overhead | measured overhead (IQR) | % of step | error "
        "| faults | system |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in sorted(overhead_points(plans), key=lambda r: (r.model, r.budget, r.costs)):
        share = (p.delta or 0) / base_step(plans, p)
        mark = " *" if eligible(plans, p) else ""
        lines.append(
            f"| {p.model} | {p.budget:g} | {p.costs} | {p.saved_bytes / MIB:.2f} MiB | "
            f"{_ms(p.est_delta)} ms | {_ms(p.delta)} ms ({_ms(p.delta_iqr)}) | {share * 100:.1f}%{mark} | "
            f"{_pct(relative_error(p))} | {_count(p.faults_per_step)} | {_ms(p.system_delta)} ms |"
        )
    lines += [
        "",
        "Budget-1.0 plans (the reference of each cost model):",
        "",
        "| model | costs | saved | step (IQR) | est. overhead | faults |",
        "|---|---|---|---|---|---|",
    ]
    for p in sorted(
        (p for p in plans if p.budget == 1.0 and not p.at_bytes), key=lambda r: (r.model, r.costs)
    ):
        lines.append(
            f"| {p.model} | {p.costs} | {p.saved_bytes / MIB:.2f} MiB | {_ms(p.step_seconds)} ms "
            f"({_ms(p.step_iqr)}) | {_ms(p.est_overhead)} ms | {_count(p.faults_per_step)} |"
        )
    lines += [
        "",
        "## Use in the solver: measured costs at the roofline plan's saved bytes",
        "",
        "Ours with measured costs and `memory_budget_bytes` = the bytes the roofline plan at that budget "
        "saves. `difference` is the median paired step-time difference (measured-cost plan minus "
        "roofline plan, IQR beside it); differences under 1% of the step, or under 2 standard errors of the "
        "median (SE = 1.2533 IQR / 1.349 / sqrt(rounds)), count as equal.",
        "",
        "| model | budget | roofline saves | measured saves | roofline step | measured step "
        "| difference (IQR) | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in sorted((p for p in plans if p.at_bytes), key=lambda r: (r.model, r.budget)):
        roofline = next(
            r for r in plans if r.model == p.model and r.costs == ROOFLINE and r.budget == p.budget
        )
        lines.append(
            f"| {p.model} | {p.budget:g} | {roofline.saved_bytes / MIB:.2f} MiB | "
            f"{p.saved_bytes / MIB:.2f} MiB | {_ms(roofline.step_seconds)} ms | {_ms(p.step_seconds)} ms | "
            f"{_ms(p.vs_roofline)} ms "
            f"({_ms(p.vs_roofline_iqr)}) | {verdict(plans, p, meta['rounds'])} |"
        )
    lines += [
        "",
        "## Per-op error: estimated against in-step kernel time",
        "",
        "Each distinct timed op of the model's joint graph (op, input shapes), against its mean time per "
        "call inside the steps of the budget-0 roofline plan, its graphs run op by op with a clock around "
        "each call (`torch.profiler` slowed this machine's steps 7x). A replayed random op counts as the "
        'op it replays. Roofline: the `device="auto"` profile\'s unfused kernel '
        "estimate; measured: the isolated timing of `cost_model.measure`. `weighted error` = "
        "sum |estimate - in-step| / sum in-step; `median ratio` = median of estimate / in-step.",
        "",
        "| model | ops | in-step total | roofline weighted error | roofline median ratio "
        "| measured weighted error | measured median ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for model in dict.fromkeys(e.model for e in errors):
        mine = [e for e in errors if e.model == model]
        lines.append(
            f"| {model} | {len(mine)} | {_ms(sum(e.in_step_seconds for e in mine))} ms | "
            f"{_weighted_error(mine, 'roofline_seconds') * 100:.0f}% | "
            f"{_median_ratio(mine, 'roofline_seconds'):.2f} | "
            f"{_weighted_error(mine, 'measured_seconds') * 100:.0f}% | "
            f"{_median_ratio(mine, 'measured_seconds'):.2f} |"
        )
    lines += ["", "The ten longest ops of each model (us per call):", ""]
    lines += ["| model | op | kind | in step | roofline | measured |", "|---|---|---|---|---|---|"]
    for model in dict.fromkeys(e.model for e in errors):
        mine = sorted((e for e in errors if e.model == model), key=lambda e: -e.in_step_seconds)[:10]
        for e in mine:
            lines.append(
                f"| {model} | `{e.op}` | {e.kind} | {_us(e.in_step_seconds)} | {_us(e.roofline_seconds)} | "
                f"{_us(e.measured_seconds)} |"
            )
    if fusion:
        lines += [
            "",
            "## Fusion error: pointwise chains recomputed inside an Inductor kernel",
            "",
            "Inductor compiles `g * chain(x)` and `g * y` (y saved); `Inductor` is the median paired "
            "difference per call (IQR beside it), what recomputing the chain costs inside the fused "
            "kernel. Measured costs price it as the sum of the chain's ops' measured fused arithmetic, "
            "the roofline as their FLOPs at the `cpu` profile's vector rate.",
            "",
            "| chain | elements | Inductor (IQR) | measured estimate | roofline estimate |",
            "|---|---|---|---|---|",
        ]
        for f in fusion:
            lines.append(
                f"| {f.chain} | {f.elements:,} | {_us(f.measured_delta)} us ({_us(f.measured_delta_iqr)}) | "
                f"{_us(f.estimate_measured)} us | {_us(f.estimate_roofline)} us |"
            )
    lines += [
        "",
        "## Profiling time (12-layer nanoGPT joint graph of `benchmarks.solve_time`)",
        "",
        "| joint nodes | timed nodes | distinct ops | measured | failed | cold | warm |",
        "|---|---|---|---|---|---|---|",
        f"| {timing.joint_nodes} | {timing.timed_nodes} | {timing.distinct_ops} | {timing.measured} | "
        f"{timing.failed} | {timing.cold_seconds:.2f} s | {timing.warm_seconds * 1e3:.1f} ms |",
        "",
        "Cold: `recompute_pass.graph.costing.measure` with an empty cache (device calibration included); "
        "warm: the same call again, the cache read from disk (median of 5).",
        "",
    ]
    out.write_text("\n".join(lines))
    return out


def render(folder: Path) -> Path:
    """Tables and plot again from ``folder/records.json`` (the numbers are not re-measured)."""
    data = json.loads((folder / "records.json").read_text())
    plans = [PlanRecord(**p) for p in data["plans"]]
    errors = [OpError(**e) for e in data["op_errors"]]
    plot(plans, errors, folder / "cost_accuracy.png")
    fusion = [FusionRecord(**f) for f in data["fusion"]]
    timing = ProfilingTime(**data["profiling_time"])
    return write_results(data["meta"], plans, errors, fusion, timing, folder / "RESULTS.md")
