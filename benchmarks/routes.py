"""The predicted peak on every documented route into Inductor, against the profiler.

    python -m benchmarks.routes --models llama hf_llama --budgets 0,0.5,1 --out benchmarks/results/routes

Routes: ``recompute_backend.with_options(...)`` ("backend"), ``backend="recompute"`` with
the options in ``recompute_pass.config`` ("string"), and
``torch._inductor.config.custom_partitioner_fn = RecomputePartitioner(...)`` set by hand
before a plain ``torch.compile(model)`` ("by hand"). Each model runs each route at each peak
budget and under an absolute cap (``peak_memory_bytes``, midway between the backend
route's predicted peaks at budgets 0 and 1): one compiling step, then one step under the
CPU profiler. The prediction holds on a route only if the backward compiles there under
the config the prediction assumes (``COMPILE_PATCHES``). Gradients are compared with eager.
Writes ``RESULTS.md`` and ``routes.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.cases import SIZES, bench_cases
from benchmarks.measure import step_memory
from recompute_pass import RecomputeOptions, RecomputePartitioner, capture_reports, config, recompute_backend
from recompute_pass import torch_internals as ti

MIB = 2**20


@contextlib.contextmanager
def _backend_route(model: torch.nn.Module, options: dict[str, Any]) -> Iterator[Callable[..., Any]]:
    yield torch.compile(model, backend=recompute_backend.with_options(**options))


@contextlib.contextmanager
def _string_route(model: torch.nn.Module, options: dict[str, Any]) -> Iterator[Callable[..., Any]]:
    with config.patch(**options):  # read when the graph compiles, and the backward with it
        yield torch.compile(model, backend="recompute")


@contextlib.contextmanager
def _by_hand_route(model: torch.nn.Module, options: dict[str, Any]) -> Iterator[Callable[..., Any]]:
    with ti.inductor_config.patch(custom_partitioner_fn=RecomputePartitioner(RecomputeOptions(**options))):
        yield torch.compile(model)


ROUTES = {"backend": _backend_route, "string": _string_route, "by hand": _by_hand_route}


@dataclass(frozen=True)
class RouteRun:
    model: str
    route: str
    budget: str  # "peak 0.5" or "cap 12.34 MiB"
    allowed: int  # the predicted peak the budget allows (the report's budget_bytes)
    cap: int | None  # peak_memory_bytes, an absolute cap on the measured peak
    predicted: int
    measured: int
    grad_error: float  # max relative error of any parameter's gradient against eager

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1 if self.measured else 0.0

    @property
    def cap_holds(self) -> bool:
        return self.cap is None or self.measured <= self.cap

    @property
    def cap_text(self) -> str:
        return "-" if self.cap is None else "holds" if self.cap_holds else "EXCEEDED"


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def _relative_error(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> float:
    if actual.keys() != expected.keys():
        return float("inf")
    return max(float((actual[k] - g).norm() / g.norm().clamp_min(1e-30)) for k, g in expected.items())


def eager_grads(model_name: str, size: str) -> dict[str, torch.Tensor]:
    case = bench_cases(size)[model_name]
    torch.manual_seed(0)
    model, inputs = case.build(), case.inputs()
    model(*inputs).backward()
    return _grads(model)


def run_route(
    model_name: str, route: str, options: dict[str, Any], size: str, expected: dict[str, torch.Tensor]
) -> RouteRun:
    case = bench_cases(size)[model_name]
    torch.manual_seed(0)
    model, inputs = case.build(), case.inputs()
    torch.compiler.reset()
    with ROUTES[route](model, {**options, "fallback": False}) as compiled, capture_reports() as reports:
        compiled(*inputs).backward()
        grads = _grads(model)
        model.zero_grad(set_to_none=True)
        memory, _ = step_memory(lambda: compiled(*inputs), lambda loss: loss.backward(), torch.device("cpu"))
        model.zero_grad(set_to_none=True)
    if len(reports) != 1 or reports[0].predicted_peak_bytes is None or reports[0].fallback:
        raise RuntimeError(f"{model_name}, {route}: expected one partitioned graph, got {reports}")
    (report,) = reports
    if "peak_memory_bytes" in options:
        label = f"cap {options['peak_memory_bytes'] / MIB:.2f} MiB"
    else:
        label = f"peak {options['memory_budget']:g}"
    return RouteRun(
        model=model_name,
        route=route,
        budget=label,
        allowed=report.budget_bytes,
        cap=options.get("peak_memory_bytes"),
        predicted=report.predicted_peak_bytes,
        measured=memory.peak_bytes,
        grad_error=_relative_error(grads, expected),
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["llama", "hf_llama"])
    parser.add_argument("--budgets", default="0,0.5,1")
    parser.add_argument("--routes", nargs="+", default=list(ROUTES), choices=list(ROUTES))
    parser.add_argument("--size", default="full", choices=SIZES)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/routes"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    budgets = [float(b) for b in args.budgets.split(",")]
    rows: list[RouteRun] = []
    started = time.perf_counter()

    def sweep(model: str, options: dict[str, Any], expected: dict[str, torch.Tensor]) -> None:
        for route in args.routes:
            tick = time.perf_counter()
            run = run_route(model, route, options, args.size, expected)
            rows.append(run)
            print(
                f"[{time.perf_counter() - started:6.0f}s] {model} {route} {run.budget}: predicted "
                f"{run.predicted / MIB:.2f} MiB, measured {run.measured / MIB:.2f} MiB "
                f"({run.error:+.2%}), cap {run.cap_text}, "
                f"grad err {run.grad_error:.1e}, {time.perf_counter() - tick:.0f}s",
                flush=True,
            )

    with ti.inductor_config.patch(force_disable_caches=True):
        for model in args.models:
            expected = eager_grads(model, args.size)
            for budget in budgets:
                sweep(model, {"memory_budget": budget}, expected)
            ends = [r.predicted for r in rows if r.model == model and r.budget in ("peak 0", "peak 1")]
            if len(ends) >= 2:  # a cap midway between the range's ends
                sweep(model, {"peak_memory_bytes": (min(ends) + max(ends)) // 2}, expected)
    (args.out / "routes.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    command = "python -m benchmarks.routes " + " ".join(argv if argv is not None else sys.argv[1:])
    worst = max(abs(r.error) for r in rows)
    capped = [r for r in rows if r.cap is not None]
    lines = [
        "# The predicted peak on every route into Inductor (CPU profiler)",
        "",
        f"Command: `{command}`  ",
        f"torch {torch.__version__}; size {args.size}; wall time {time.perf_counter() - started:.0f} s",
        "",
        f"Worst prediction error: {worst:.2%}; absolute caps held in "
        f"{sum(r.cap_holds for r in capped)}/{len(capped)}; "
        f"worst gradient error against eager: {max(r.grad_error for r in rows):.1e}.",
        "",
        "| model | budget | route | allowed | predicted | measured | error | cap | grad err |",
        "|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {r.model} | {r.budget} | {r.route} | {r.allowed / MIB:.2f} MiB | "
            f"{r.predicted / MIB:.2f} MiB | {r.measured / MIB:.2f} MiB | {r.error:+.2%} | "
            f"{r.cap_text} | {r.grad_error:.1e} |"
            for r in rows
        ),
        "",
    ]
    (args.out / "RESULTS.md").write_text("\n".join(lines))
    print(f"wrote {args.out}/RESULTS.md")


if __name__ == "__main__":
    main()
