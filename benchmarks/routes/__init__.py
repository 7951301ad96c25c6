"""The predicted peak on every documented route into Inductor, against the profiler.

    python -m benchmarks.routes [--models llama hf_llama] [--budgets 0,0.5,1] [--size full]
        [--out benchmarks/routes/results]

Routes: ``recompute_backend.with_options(...)`` ("backend"), ``backend="recompute"`` with
the options in ``recompute_pass.config`` ("string"), and
``torch._inductor.config.custom_partitioner_fn = RecomputePartitioner(...)`` set by hand
before a plain ``torch.compile(model)`` ("by hand"). Each model runs each route at each peak
budget and under an absolute cap (``peak_memory_bytes``, midway between the backend
route's predicted peaks at budgets 0 and 1): one compiling step, then one step under the
CPU profiler. The prediction holds on a route only if the backward compiles there under
the config the prediction assumes (``COMPILE_PATCHES``). Gradients are compared with eager.
Writes ``<out>/routes.json`` and ``<out>/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

from benchmarks.harness.cases import SIZES, bench_cases
from benchmarks.harness.meters import step_memory
from benchmarks.harness.study import Row, Study, progress
from benchmarks.harness.training import grads_of
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


def _relative_error(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> float:
    if actual.keys() != expected.keys():
        return float("inf")
    return max(float((actual[k] - g).norm() / g.norm().clamp_min(1e-30)) for k, g in expected.items())


def eager_grads(model_name: str, size: str) -> dict[str, torch.Tensor]:
    case = bench_cases(size)[model_name]
    torch.manual_seed(0)
    model, inputs = case.build(), case.inputs()
    model(*inputs).backward()
    return grads_of(model)


def run_route(
    model_name: str, route: str, options: dict[str, Any], size: str, expected: dict[str, torch.Tensor]
) -> RouteRun:
    case = bench_cases(size)[model_name]
    torch.manual_seed(0)
    model, inputs = case.build(), case.inputs()
    torch.compiler.reset()
    with ROUTES[route](model, {**options, "fallback": False}) as compiled, capture_reports() as reports:
        compiled(*inputs).backward()
        grads = grads_of(model)
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


def measure(args: argparse.Namespace) -> list[Row]:
    budgets = [float(b) for b in args.budgets.split(",")]
    runs: list[RouteRun] = []

    def sweep(model: str, options: dict[str, Any], expected: dict[str, torch.Tensor]) -> None:
        for route in args.routes:
            run = run_route(model, route, options, args.size, expected)
            runs.append(run)
            progress(
                f"{model} {route} {run.budget}: predicted {run.predicted / MIB:.2f} MiB, measured "
                f"{run.measured / MIB:.2f} MiB ({run.error:+.2%}), cap {run.cap_text}, "
                f"grad err {run.grad_error:.1e}"
            )

    with ti.inductor_config.patch(force_disable_caches=True):
        for model in args.models:
            expected = eager_grads(model, args.size)
            for budget in budgets:
                sweep(model, {"memory_budget": budget}, expected)
            ends = [r.predicted for r in runs if r.model == model and r.budget in ("peak 0", "peak 1")]
            if len(ends) >= 2:  # a cap midway between the range's ends
                sweep(model, {"peak_memory_bytes": (min(ends) + max(ends)) // 2}, expected)
    return [asdict(r) for r in runs]


def table(rows: Sequence[Row]) -> str:
    runs = [RouteRun(**{f.name: r[f.name] for f in fields(RouteRun)}) for r in rows]  # type: ignore[arg-type]
    capped = [r for r in runs if r.cap is not None]
    return "\n".join(
        [
            f"Worst prediction error: {max(abs(r.error) for r in runs):.2%}; absolute caps held in "
            f"{sum(r.cap_holds for r in capped)}/{len(capped)}; "
            f"worst gradient error against eager: {max(r.grad_error for r in runs):.1e}.",
            "",
            "| model | budget | route | allowed | predicted | measured | error | cap | grad err |",
            "|---|---|---|---|---|---|---|---|---|",
            *(
                f"| {r.model} | {r.budget} | {r.route} | {r.allowed / MIB:.2f} MiB | "
                f"{r.predicted / MIB:.2f} MiB | {r.measured / MIB:.2f} MiB | {r.error:+.2%} | "
                f"{r.cap_text} | {r.grad_error:.1e} |"
                for r in runs
            ),
        ]
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", nargs="+", default=["llama", "hf_llama"])
    parser.add_argument("--budgets", default="0,0.5,1")
    parser.add_argument("--routes", nargs="+", default=list(ROUTES), choices=list(ROUTES))
    parser.add_argument("--size", default="full", choices=SIZES)


STUDY = Study("benchmarks.routes", __doc__, _arguments, measure, table)
main = STUDY.main
