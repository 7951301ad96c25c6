"""RESULTS.md and one plot per model and cap, from ``benchmarks.longest_sequence``'s JSONs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from benchmarks.harness.plots import plt, save
from benchmarks.harness.records import GRAD_TOLERANCE

MIB = float(1 << 20)
LABELS = {
    "compile": "torch.compile",
    "checkpoint": "eager + checkpoint/block",
    "budget_0": "torch.compile, activation_memory_budget=0",
    "budget_0.5": "torch.compile, activation_memory_budget=0.5",
    "ours": "recompute: fit_longest",
}
COLORS = {
    "compile": "tab:orange",
    "checkpoint": "black",
    "budget_0": "tab:red",
    "budget_0.5": "tab:purple",
    "ours": "tab:blue",
}


def _longest(result: dict) -> str:
    if result["longest"] is None:
        return "none"
    return f"{result['longest']}{'+' if result['beyond_high'] else ''}"


def _time(result: dict) -> str:
    seconds = result["step_seconds"]
    if not seconds:
        return "-"
    return f"{statistics.median(seconds) * 1e3:.0f} ms (min {min(seconds) * 1e3:.0f})"


def targets(record: dict) -> list[tuple[str, bool | None, str]]:
    """(target, met, detail) for one model and cap."""
    by = {r["system"]: r for r in record["results"]}
    cap = record["cap"]
    rows: list[tuple[str, bool | None, str]] = []
    ours = by.get("ours")
    if ours is None or ours["longest"] is None or ours["predicted"] is None:
        return [("ours measured", None, "not run")]
    measured, predicted = ours["longest"], ours["predicted"]
    error = (predicted - measured) / measured
    rows.append(
        (
            "predicted longest within 3% of the measured boundary",
            abs(error) <= 0.03,
            f"predicted {predicted}, measured {measured} ({error:+.1%})",
        )
    )
    at = ours["measured_at_predicted"]
    rows.append(
        (
            "the returned plan runs under the cap",
            at is not None and at <= cap,
            f"measured {at / MIB:.2f} MiB at {predicted} (predicted {ours['predicted_peak'] / MIB:.2f}) "
            f"vs cap {cap / MIB:.2f} MiB",
        )
    )
    diff = ours["grad_diff"]
    reference = "torch.compile's" if record.get("rng") == "inductor" else "eager"  # --rng
    rows.append(
        (
            f"gradients equal to {reference}",
            diff is not None and diff <= GRAD_TOLERANCE,
            f"max relative difference {diff:.1e}" if diff is not None else "-",
        )
    )
    for other, ratio in (("compile", 1.5), ("checkpoint", 1.0)):
        base = by.get(other)
        if base is None or base["longest"] is None:
            continue
        got = measured / base["longest"]
        more = " (its boundary is beyond --high: a lower bound)" if base["beyond_high"] else ""
        rows.append(
            (
                f">= {ratio:g}x {LABELS[other]}'s longest",
                got >= ratio,
                f"{measured} vs {base['longest']}: {got:.2f}x{more}",
            )
        )
    return rows


def plot(record: dict, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 5))
    for result in record["results"]:
        system = result["system"]
        peaks = sorted((int(n), p) for n, p in result["peaks"].items())
        if peaks:
            ax.plot(
                [n for n, _ in peaks],
                [p / MIB for _, p in peaks],
                "o-",
                color=COLORS[system],
                label=f"{LABELS[system]} (measured)",
                markersize=4,
            )
        if system == "ours" and result["probes"]:
            probes = sorted((int(n), p) for n, p in result["probes"].items())
            ax.plot(
                [n for n, _ in probes],
                [p / MIB for _, p in probes],
                "x--",
                color=COLORS[system],
                label="fit_longest: lowest predicted peak per length",
                markersize=6,
            )
            ax.scatter(
                [result["predicted"]],
                [result["predicted_peak"] / MIB],
                marker="*",
                s=160,
                color=COLORS[system],
                label="fit_longest's plan: predicted peak",
                zorder=5,
            )
    ax.axhline(record["cap"] / MIB, color="gray", linestyle=":", label="cap")
    ax.set_xlabel("sequence length")
    ax.set_ylabel("peak memory of one training step (MiB)")
    ax.set_title(
        f"{record['model']}: longest sequence under {record['cap'] / MIB:.0f} MiB ({record['path']})"
    )
    ax.set_ylim(0, record["cap"] / MIB * 1.6)
    ax.legend(fontsize=7)
    return save(fig, out / f"{_stem(record)}.png", dpi=110)


def _stem(record: dict) -> str:
    return f"{record['model']}_{record['cap'] >> 20}MiB_{record['path']}"


def write_report(out: Path) -> Path:
    records = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    records.sort(key=lambda r: (r["model"] != "llama", r["model"], r["path"], r["cap"]))
    lines = [
        "# Longest sequence at a fixed memory cap",
        "",
        "Per system, the longest sequence whose measured peak (one forward+backward, above the",
        "level before the forward, CPU allocator events) fits the cap, found by measured bisection;",
        "each compiled system compiled once with `dynamic=True`. Ours is `fit_longest`'s answer from",
        "one trace, then measured the same way with the plan it returned. Step time: median of the",
        "timed steps at each system's own longest length.",
        "",
    ]
    notes = out / "NOTES.md"  # the findings, written by hand: kept across regenerations
    if notes.exists():
        lines += [notes.read_text().strip(), ""]
    for record in records:
        lines += [
            f"## {record['model']}, cap {record['cap'] / MIB:.0f} MiB ({record['path']})",
            "",
            f"Command: `{record['command']}`  ",
            f"Lengths {record['grid'][0]}..{record['grid'][1]} in steps of {record['grid'][2]}, batch "
            f"{record['batch']}, size `{record['size']}`, {record.get('layers', 2)} layers; "
            f"torch {record['torch']}; wall time {record['wall_seconds'] / 60:.1f} min",
            "",
            f"![{_stem(record)}]({plot(record, out).name})",
            "",
            "| system | longest (measured) | peak there | step time there | compile | notes |",
            "|---|---|---|---|---|---|",
        ]
        for r in record["results"]:
            peak = r["peaks"].get(str(r["longest"])) if r["longest"] is not None else None
            notes = ""
            if r["system"] == "ours" and r["predicted"] is not None:
                notes = (
                    f"predicted {r['predicted']} ({r['predicted_peak'] / MIB:.2f} MiB), "
                    f"fit {r['fit_seconds']:.0f} s, est. overhead {r['predicted_overhead'] * 1e3:.2f} ms"
                )
            lines.append(
                f"| {LABELS[r['system']]} | {_longest(r)} | {peak / MIB:.2f} MiB |"
                if peak is not None
                else f"| {LABELS[r['system']]} | {_longest(r)} | - |"
            )
            lines[-1] += f" {_time(r)} | {r['compile_seconds']:.0f} s | {notes} |"
        lines += ["", "| target | status | detail |", "|---|---|---|"]
        for name, met, detail in targets(record):
            status = "not run" if met is None else ("met" if met else "**not met**")
            lines.append(f"| {name} | {status} | {detail} |")
        lines.append("")
    path = out / "RESULTS.md"
    path.write_text("\n".join(lines) + "\n")
    return path
