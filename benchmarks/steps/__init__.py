"""One step, many graphs: the step's budget and cap on every route a model is compiled by.

    python -m benchmarks.steps [--models hf_llama hf_gpt2] [--routes whole block break]
        [--budgets 1 0.5 0] [--layers 12] [--dim 256] [--seq 512] [--batch 2] [--vocab 2048]
        [--out benchmarks/steps/results]

HF Llama and GPT-2 built from configs with HF's defaults (``use_cache`` as HF sets it,
GPT-2's dropout), compiled three ways: whole (one graph), per block (each decoder layer's
``.compile``, as torchtitan and the FSDP2 recipe do) and whole with a graph break in the
layer loop (a forward hook on one layer). Each runs at each budget, then under a cap
midway between budget 0's and budget 1's measured peaks. Per configuration, in a process of
its own: the steps until the step's plan is made (their wall time, the first two steps'
too), the step report's predicted peak, and the next step's measured peak (the one
definition: the profiler's allocations, the model's outputs held through backward) with
its gradients against eager's (dropout draws eager's masks: ``fallback_random``).

Beside them, with ``use_cache`` off (as checkpointing forces it): budget 0 on each route,
eager per-block ``torch.utils.checkpoint``, and ``torch.compile`` per block (its first two
steps: the compile-time yardstick). Writes ``<out>/steps.json`` and ``<out>/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.checkpoint_flops import checkpoint_blocks
from benchmarks.harness.meters import step_memory
from benchmarks.harness.study import (
    Row,
    add_shape_arguments,
    command,
    parser,
    progress,
    save_json,
    write_results,
)
from benchmarks.harness.training import benchmark_settings, grads_of, relative_grad_diff

MB = 1e6
MODELS = ("hf_llama", "hf_gpt2")
ROUTES = ("whole", "block", "break")
PROG = "benchmarks.steps"


def build(name: str, args: argparse.Namespace, *, use_cache: bool | None) -> torch.nn.Module:
    """The model from HF's config defaults (``use_cache=None``: HF's own), seed 0."""
    import transformers

    torch.manual_seed(0)
    shape: dict[str, Any] = {"vocab_size": args.vocab, "num_hidden_layers": args.layers}
    if name == "hf_llama":
        hidden = (8 * args.dim // 3 + 7) // 8 * 8
        config = transformers.LlamaConfig(
            **shape,
            hidden_size=args.dim,
            intermediate_size=hidden,
            num_attention_heads=4,
            num_key_value_heads=4,
            max_position_embeddings=args.seq,
        )
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(
            vocab_size=args.vocab, n_layer=args.layers, n_embd=args.dim, n_head=4, n_positions=args.seq
        )
        model = transformers.GPT2LMHeadModel(config)
        model.loss_type = "ForCausalLM"  # resolved at run time otherwise: a graph break
    if use_cache is not None:
        model.config.use_cache = use_cache
    return model


def blocks_of(model: torch.nn.Module) -> Sequence[torch.nn.Module]:
    inner = getattr(model, "model", None) or model.transformer  # type: ignore[union-attr]
    return list(inner.layers if hasattr(inner, "layers") else inner.h)  # type: ignore[union-attr]


def prepare(model: torch.nn.Module, system: str, route: str, options: dict[str, Any]) -> Callable[..., Any]:
    """The model as ``system`` runs it on ``route``."""
    from recompute_pass import recompute_backend

    if system == "checkpoint":
        model.config.use_cache = False
        checkpoint_blocks(blocks_of(model))
        return model
    backend: Any = recompute_backend.with_options(**options) if system == "recompute" else "inductor"
    if route == "block":
        for block in blocks_of(model):
            block.compile(backend=backend)
        return model
    if route == "break":  # a hook Dynamo cannot trace, in the layer loop
        blocks_of(model)[1].register_forward_hook(lambda module, args, output: torch._dynamo.graph_break())
    return torch.compile(model, backend=backend)


def run_one(spec: dict[str, Any]) -> Row:
    """One configuration, in this process: the steps until planned, then the measured step."""
    from recompute_pass import capture_reports

    args = argparse.Namespace(**spec["shape"])
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(1))
    model = build(spec["model"], args, use_cache=spec["use_cache"])
    reference = build(spec["model"], args, use_cache=spec["use_cache"])
    torch.manual_seed(2)
    reference(input_ids=tokens, labels=tokens).loss.backward()
    expected = grads_of(reference)
    del reference
    with benchmark_settings():
        compiled = prepare(model, spec["system"], spec["route"], spec["options"])
        report, steps, times = None, 0, []
        started = time.perf_counter()
        while steps < 5:
            with capture_reports() as reports:
                torch.manual_seed(2)
                outputs = compiled(input_ids=tokens, labels=tokens)
                outputs.loss.backward()
            del outputs
            steps += 1
            times.append(time.perf_counter() - started)
            model.zero_grad(set_to_none=True)
            if reports.steps:
                report = reports.steps[-1]
            if steps >= 2 and (spec["system"] != "recompute" or report is not None):
                break
        held: dict[str, Any] = {}

        def forward() -> torch.Tensor:
            torch.manual_seed(2)
            held["outputs"] = compiled(input_ids=tokens, labels=tokens)
            return held["outputs"].loss

        gc.collect()
        memory, _ = step_memory(forward, lambda loss: loss.backward(), torch.device("cpu"))
        held.clear()
    row: Row = {
        "model": spec["model"],
        "route": spec["route"],
        "system": spec["system"],
        "budget": spec["options"].get("memory_budget", "cap" if spec["options"] else None),
        "cap": spec["options"].get("peak_memory_bytes"),
        "use_cache": model.config.use_cache,
        "measured": memory.peak_bytes,
        "grad_error": relative_grad_diff(grads_of(model), expected),
        "steps_to_plan": steps,
        "first_two_steps_s": times[1] if len(times) > 1 else None,
        "first_step_s": times[0],
    }
    if report is not None:
        row.update(
            predicted=report.predicted_peak_bytes,
            peak_at=report.peak_at,
            graphs=len(report.graphs),
            calls=report.calls,
            planning_s=report.planning_seconds,
            notes=list(report.notes),
        )
    return row


def _subprocess(spec: dict[str, Any]) -> Row:
    """``run_one`` in a fresh process (Dynamo's caches, the planner and the allocator as new)."""
    done = subprocess.run(
        [sys.executable, "-m", PROG, "--one", json.dumps(spec)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = (done.stderr or "").strip().splitlines()[-8:]
        return {**spec, "error": "\n".join(tail)}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace) -> list[Row]:
    shape = {k: getattr(args, k) for k in ("layers", "dim", "seq", "batch", "vocab")}
    rows: list[Row] = []

    def run(model: str, route: str, system: str, options: dict[str, Any], use_cache: bool | None) -> Row:
        spec = dict(
            model=model, route=route, system=system, options=options, use_cache=use_cache, shape=shape
        )
        progress(f"{model} {route} {system} {options or ''} use_cache={use_cache}")
        row = _subprocess(spec)
        progress(f"  -> {_brief(row)}")
        rows.append(row)
        return row

    for model in args.models:
        for route in args.routes:
            peaks = {b: run(model, route, "recompute", {"memory_budget": b}, None) for b in args.budgets}
            if 1.0 in peaks and 0.0 in peaks and "measured" in peaks[1.0] and "measured" in peaks[0.0]:
                cap = (int(peaks[1.0]["measured"]) + int(peaks[0.0]["measured"])) // 2
                run(model, route, "recompute", {"peak_memory_bytes": cap}, None)
        if args.compare:
            for route in args.routes:
                run(model, route, "recompute", {"memory_budget": 0.0}, False)
            run(model, "block", "checkpoint", {}, False)
            run(model, "block", "compile", {}, None)
    return rows


def measure_timing(args: argparse.Namespace) -> list[Row]:
    """The first two steps, compiles included, of a per-block compile: ``torch.compile``'s
    and ours at each budget, alternating, each in a fresh process, ``--repeats`` times."""
    shape = {k: getattr(args, k) for k in ("layers", "dim", "seq", "batch", "vocab")}
    systems = [("compile", {})] + [("recompute", {"memory_budget": b}) for b in args.budgets]
    rows: list[Row] = []
    for repeat in range(args.repeats):
        for model in args.models:
            for system, options in systems:
                spec = dict(
                    model=model, route="block", system=system, options=options, use_cache=None, shape=shape
                )
                progress(f"timing {repeat + 1}/{args.repeats}: {model} block {system} {options or ''}")
                row = _subprocess(spec)
                progress(f"  -> first two steps {row.get('first_two_steps_s', '?')} s")
                rows.append(row)
    return rows


def timing_table(rows: Sequence[Row]) -> str:
    """Median first-two-steps seconds per system, and as a ratio to ``torch.compile``'s."""
    import statistics

    lines = [
        "| model | system | budget | runs | first two steps s (median) | ratio to torch.compile |",
        "|---|---|---|---:|---:|---:|",
    ]
    for model in dict.fromkeys(str(r["model"]) for r in rows):
        ok = [r for r in rows if r["model"] == model and r.get("first_two_steps_s")]
        keys = dict.fromkeys((str(r["system"]), str(r.get("budget"))) for r in ok)
        medians = {
            k: statistics.median(
                float(r["first_two_steps_s"]) for r in ok if (str(r["system"]), str(r.get("budget"))) == k
            )
            for k in keys
        }  # type: ignore[arg-type]
        base = medians.get(("compile", "None"))
        for (system, budget), seconds in medians.items():
            runs = sum((str(r["system"]), str(r.get("budget"))) == (system, budget) for r in ok)
            ratio = f"{seconds / base:.2f}" if base else "-"
            lines.append(f"| {model} | {system} | {budget} | {runs} | {seconds:.1f} | {ratio} |")
    return "\n".join(lines)


def _brief(row: Row) -> str:
    if "error" in row:
        return f"error: {str(row['error']).splitlines()[-1]}"
    predicted = row.get("predicted")
    ratio = f", predicted/measured {predicted / row['measured']:.4f}" if predicted else ""  # type: ignore[operator]
    return f"measured {row['measured'] / MB:.2f} MB{ratio}, grad error {row['grad_error']:.1e}"


HEADER = (
    "model",
    "route",
    "system",
    "budget",
    "use_cache",
    "graphs (runs)",
    "predicted MB",
    "measured MB",
    "pred/meas",
    "cap held",
    "grad err",
    "first two steps s",
)


def table(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in rows:
        if "error" in row:
            error = str(row["error"]).splitlines()[-1][-80:]
            lines.append(f"| {row['model']} | {row['route']} | {row['system']} | error: {error} |")
            continue
        predicted, cap, measured = row.get("predicted"), row.get("cap"), int(row["measured"])  # type: ignore[call-overload]
        cells = [
            row["model"],
            row["route"],
            row["system"],
            f"cap {cap / MB:.2f} MB" if cap else row["budget"],  # type: ignore[operator]
            row["use_cache"],
            f"{row['graphs']} ({row['calls']})" if "graphs" in row else "-",
            f"{predicted / MB:.2f}" if predicted else "-",  # type: ignore[operator]
            f"{measured / MB:.2f}",
            f"{predicted / measured:.4f}" if predicted else "-",  # type: ignore[operator]
            ("yes" if measured <= cap else "**no**") if cap else "-",  # type: ignore[operator]
            f"{row['grad_error']:.1e}",
            f"{row['first_two_steps_s']:.1f}" if row.get("first_two_steps_s") else "-",
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    made = parser(PROG, __doc__ or "", out=None)
    made.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    made.add_argument("--routes", nargs="+", default=list(ROUTES), choices=ROUTES)
    made.add_argument("--budgets", nargs="+", type=float, default=[1.0, 0.5, 0.0])
    made.add_argument(
        "--no-compare", dest="compare", action="store_false", help="skip the use_cache-off rows"
    )
    made.add_argument(
        "--timing",
        action="store_true",
        help="instead: the first two steps of a per-block compile, ours against torch.compile's",
    )
    made.add_argument("--repeats", type=int, default=2, help="--timing's runs of each system")
    made.add_argument("--one", help=argparse.SUPPRESS)  # one configuration, as JSON (a worker)
    add_shape_arguments(made, layers=12, seq=512, dim=256)
    made.set_defaults(vocab=2048)
    args = made.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return 0
    out = args.out or Path("benchmarks", "steps", "results")
    started = time.perf_counter()
    rows = measure_timing(args) if args.timing else measure(args)
    run = command(PROG, argv)
    save_json(out / ("timing.json" if args.timing else "steps.json"), run, rows=rows)
    text = timing_table(rows) if args.timing else table(rows)
    title = "Compile time of a per-block compile" if args.timing else "One step, many graphs"
    write_results(out, title, run, [text], time.perf_counter() - started)
    print(text)
    return 0
