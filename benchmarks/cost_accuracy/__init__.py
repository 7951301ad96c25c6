"""How right is the cost model? Estimated step overhead against the clock, roofline against measured costs.

    python -m benchmarks.cost_accuracy [--models gpt llama cnn] [--budgets 0,0.25,0.5,0.75]
        [--rounds 20] [--per-round 3] [--threads 1] [--size full] [--no-fusion] [--report-only]
        [--out benchmarks/cost_accuracy/results]

Four measurements, one process, the ``graphs`` path (partitioned graphs run without codegen,
as ``benchmarks.frontier --path graphs`` does), and ``torch.set_num_threads(--threads)``:

1. **Step overhead.** Per model and budget, ours with roofline costs (``device="auto"``) and
   with measured costs (``device="measure"``, one op-time cache shared by every compile),
   plus ours with measured costs at the roofline plan's saved bytes
   (``memory_budget_bytes``). Estimated overhead: the report's ``estimated_step_overhead``
   minus that of the same cost model's plan at budget 1.0. Measured: the median over rounds
   of the step time minus that of the budget-1.0 plan in the same round; every distinct
   plan runs ``--per-round`` steps per round (the fastest counts), in a shuffled order, so
   machine noise hits all alike.
2. **Per-op error.** Each timed op (distinct op, shapes, layout) of the model's joint graph:
   the roofline's kernel estimate and the isolated measurement, against the op's mean time
   inside real steps (the budget-0 roofline plan, which runs every op forward and many
   again in backward), the partitioned graphs run op by op with a clock around each call
   (``_OpClock``). Matched on op name and input shapes.
3. **Fusion error.** Measured costs price a pointwise op fused into a neighbour's kernel by
   its arithmetic, timed per op (``cost_model.measure``). For pointwise chains from the
   models, Inductor compiles ``g * chain(x)`` and ``g * y`` (y saved); the difference is
   what recomputing the chain really costs inside a fused kernel.
4. **Profiling time.** ``recompute_pass.graph.costing.measure`` on the 12-layer nanoGPT joint
   graph of ``benchmarks.solve_time``: cold (empty cache, device calibration included) and
   warm (the same cache read from disk).

Writes ``records.json``, ``RESULTS.md`` (tables, targets, the exact command) and
``cost_accuracy.png`` to ``--out``.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import math
import random
import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import fx, nn
from torch.fx.experimental.proxy_tensor import make_fx

from benchmarks.cost_accuracy.accuracy_records import (
    MEASURED,
    ROOFLINE,
    FusionRecord,
    OpError,
    PlanRecord,
    ProfilingTime,
)
from benchmarks.cost_accuracy.accuracy_report import plot, render, write_results
from benchmarks.harness.cases import SHAPES, SIZES, bench_cases
from benchmarks.harness.machine import load_average, machine
from benchmarks.harness.models import GPT, GPTConfig
from benchmarks.harness.partition_stats import RecordingPartitioner
from benchmarks.harness.records import GRAD_TOLERANCE
from benchmarks.harness.snapshot import git_state
from benchmarks.harness.study import command, parser, progress
from benchmarks.harness.systems import make_backend
from benchmarks.harness.training import (
    benchmark_settings,
    build,
    clear_grads,
    eager_step,
    grads_of,
    relative_grad_diff,
)
from cost_model import SizeHints, estimate_runtime, get_profile, measure_op_times, node_cost
from cost_model.torch_internals import is_op_overload, schema_name
from recompute_pass import PartitionReport, RecomputeOptions, RecomputePartitioner, capture_reports
from recompute_pass import torch_internals as ti
from recompute_pass.graph.costing import measure as measure_op_costs
from recompute_pass.graph.joint_graph import analyze, prepare
from recompute_pass.partitioner import code_hash

DEFAULT_MODELS = ("gpt", "llama", "cnn")
DEFAULT_BUDGETS = (0.0, 0.25, 0.5, 0.75)
STEP_SEED = 2


# -- 1. step overhead ----------------------------------------------------------------------


@dataclass
class _Variant:
    costs: str
    budget: float
    at_bytes: bool
    options: RecomputeOptions
    model: nn.Module
    fn: Callable[..., torch.Tensor]
    reports: list[PartitionReport]
    graph_saved_bytes: int
    grads_ok: bool

    @property
    def plan(self) -> str:
        """What was decided, without the lines that describe the budget rather than the plan."""
        texts = []
        for report in self.reports:
            lines = report.to_text().splitlines()
            keep = [ln for ln in lines if ln.startswith(("saved", "recomputed", "  "))]
            texts.append("\n".join(keep))
        return "\n---\n".join(texts)


def _compile(
    base: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    options: RecomputeOptions,
    reference: dict[str, torch.Tensor],
    *,
    costs: str,
    budget: float,
    at_bytes: bool,
) -> _Variant:
    model = copy.deepcopy(base)
    recorder = RecordingPartitioner(RecomputePartitioner(options))
    fn = torch.compile(model, backend=make_backend(recorder, "graphs"))
    with capture_reports() as reports:
        clear_grads(model)
        torch.manual_seed(STEP_SEED)
        fn(*inputs).backward()
    grads_ok = relative_grad_diff(grads_of(model), reference) <= GRAD_TOLERANCE
    saved = recorder.total().saved_bytes
    return _Variant(costs, budget, at_bytes, options, model, fn, list(reports), saved, grads_ok)


def _step_seconds(variant: _Variant, inputs: tuple[torch.Tensor, ...]) -> float:
    clear_grads(variant.model)
    torch.manual_seed(STEP_SEED)
    start = time.perf_counter()
    variant.fn(*inputs).backward()
    return time.perf_counter() - start


def measure_plans(
    model_name: str, size: str, budgets: Sequence[float], rounds: int, cache_dir: Path, per_round: int = 3
) -> tuple[list[PlanRecord], nn.Module, tuple[torch.Tensor, ...]]:
    """Compile every plan, then time them interleaved (see the module docstring)."""
    case = bench_cases(size)[model_name]
    base, inputs = build(case, 0, torch.device("cpu"))
    _, reference = eager_step(base, inputs, STEP_SEED)
    ratios = sorted({*budgets, 1.0})
    variants: list[_Variant] = []
    for costs in (ROOFLINE, MEASURED):
        device = "auto" if costs == ROOFLINE else "measure"
        for ratio in ratios:
            options = RecomputeOptions(
                memory_budget=ratio, device=device, fallback=False, profile_cache_dir=str(cache_dir)
            )
            variants.append(
                _compile(base, inputs, options, reference, costs=costs, budget=ratio, at_bytes=False)
            )
    for variant in [v for v in variants if v.costs == ROOFLINE and v.budget < 1.0]:
        saved = sum(r.saved_bytes or 0 for r in variant.reports)
        options = RecomputeOptions(
            memory_budget_bytes=saved, device="measure", fallback=False, profile_cache_dir=str(cache_dir)
        )
        variants.append(
            _compile(base, inputs, options, reference, costs=MEASURED, budget=variant.budget, at_bytes=True)
        )

    # One timing per distinct plan: equal plans get equal times, not two noisy draws.
    distinct: dict[str, _Variant] = {}
    for variant in variants:
        distinct.setdefault(variant.plan, variant)
    order = list(distinct)
    for plan in order:  # warm-up
        for _ in range(2):
            _step_seconds(distinct[plan], inputs)
    times: dict[str, list[float]] = {plan: [] for plan in order}
    faults: dict[str, list[float]] = {plan: [] for plan in order}  # per step, per round
    system: dict[str, list[float]] = {plan: [] for plan in order}
    shuffle = random.Random(0)
    for _ in range(rounds):
        shuffle.shuffle(order)
        for plan in order:
            # The fastest of a few steps: a step the scheduler preempted says nothing of the plan.
            before = resource.getrusage(resource.RUSAGE_SELF)
            times[plan].append(min(_step_seconds(distinct[plan], inputs) for _ in range(per_round)))
            after = resource.getrusage(resource.RUSAGE_SELF)
            faults[plan].append((after.ru_minflt - before.ru_minflt) / per_round)
            system[plan].append((after.ru_stime - before.ru_stime) / per_round)

    records = []
    base_plan = {v.costs: v.plan for v in variants if v.budget == 1.0 and not v.at_bytes}
    base_est = {
        v.costs: _sum(r.estimated_step_overhead for r in v.reports)
        for v in variants
        if v.budget == 1.0 and not v.at_bytes
    }
    roofline_plan = {v.budget: v.plan for v in variants if v.costs == ROOFLINE}
    base_system = {costs: statistics.mean(system[plan]) for costs, plan in base_plan.items()}

    def paired(plan: str, other: str) -> tuple[float, float]:
        return _median_iqr([t - b for t, b in zip(times[plan], times[other], strict=True)])

    for variant in variants:
        median, iqr = _median_iqr(times[variant.plan])
        delta, delta_iqr = paired(variant.plan, base_plan[variant.costs])
        versus, versus_iqr = (
            paired(variant.plan, roofline_plan[variant.budget]) if variant.at_bytes else (None, None)
        )
        est = _sum(r.estimated_step_overhead for r in variant.reports)
        records.append(
            PlanRecord(
                model=model_name,
                costs=variant.costs,
                budget=variant.budget,
                at_bytes=variant.at_bytes,
                budget_bytes=variant.options.memory_budget_bytes,
                saved_bytes=int(_sum(r.saved_bytes for r in variant.reports)),
                graph_saved_bytes=variant.graph_saved_bytes,
                recompute_flops=int(_sum(r.recompute_flops for r in variant.reports)),
                est_overhead=est,
                plan=hashlib.sha256(variant.plan.encode()).hexdigest()[:8],
                step_seconds=median,
                step_iqr=iqr,
                grads_ok=variant.grads_ok,
                est_delta=None if variant.at_bytes else est - base_est[variant.costs],
                faults_per_step=statistics.median(faults[variant.plan]),
                system_delta=statistics.mean(system[variant.plan]) - base_system[variant.costs],
                delta=delta,
                delta_iqr=delta_iqr,
                vs_roofline=versus,
                vs_roofline_iqr=versus_iqr,
            )
        )
    return records, base, inputs


def _sum(values: object) -> float:
    return sum(v or 0 for v in values)  # type: ignore[union-attr]


def _median_iqr(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], 0.0
    q = statistics.quantiles(values, n=4)
    return statistics.median(values), q[2] - q[0]


# -- 2. per-op error -----------------------------------------------------------------------


def capture_joint(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[fx.GraphModule, dict]:
    """The (single) joint graph of one step, as our partitioner would get it."""
    captured: list[tuple[fx.GraphModule, dict]] = []

    def grab(gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: object):
        graph = fx.Graph()
        graph.output(graph.graph_copy(gm.graph, {}))
        captured.append((fx.GraphModule(gm, graph), dict(kwargs)))
        return ti.min_cut_rematerialization_partition(gm, joint_inputs, compiler="inductor", **kwargs)

    torch._dynamo.reset()
    torch.compile(copy.deepcopy(model), backend=ti.eager_aot_backend(grab))(*inputs).backward()
    if len(captured) != 1:
        raise RuntimeError(f"expected one joint graph, got {len(captured)}")
    return captured[0]


def _joint(model: nn.Module, inputs: tuple[torch.Tensor, ...]):
    gm, kwargs = capture_joint(model, inputs)
    prepare(gm)
    return analyze(
        gm,
        num_fwd_outputs=kwargs["num_fwd_outputs"],
        static_lifetime_input_indices=kwargs.get("static_lifetime_input_indices") or [],
    )


def op_errors(
    model_name: str, model: nn.Module, inputs: tuple[torch.Tensor, ...], cache_dir: Path, steps: int = 9
) -> list[OpError]:
    """Per timed op: roofline and isolated measurement against its time inside a step."""
    joint = _joint(model, inputs)
    measured = measure_op_costs(joint, compiler=None, cache_dir=str(cache_dir), time_limit=60.0).times
    hints = SizeHints.from_graph(joint.module)
    roofline_profile = get_profile("cpu")
    groups: dict[str, list[fx.Node]] = {}
    for node in measured.seconds:
        shapes = [
            tuple(_hinted(a.meta["val"].shape, hints))
            for a in node.args
            if isinstance(a, fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)
        ]
        groups.setdefault(_op_key(node.target, shapes), []).append(node)

    # The budget-0 roofline plan (every op runs forward, many again in backward), op by op.
    clock = _OpClock()
    step = copy.deepcopy(model)
    options = RecomputeOptions(memory_budget=0.0, fallback=False)
    fn = torch.compile(step, backend=ti.eager_aot_backend(RecomputePartitioner(options), clock.runner))
    torch._dynamo.reset()
    for _ in range(2):
        clear_grads(step)
        fn(*inputs).backward()
    clock.on = True
    for _ in range(steps):
        clear_grads(step)
        fn(*inputs).backward()
    clock.on = False

    errors = []
    for key, nodes in sorted(groups.items()):
        if key not in clock.seconds:
            continue
        errors.append(
            OpError(
                model=model_name,
                op=key,
                kind=node_cost(nodes[0]).kind.value,
                nodes=len(nodes),
                roofline_seconds=statistics.mean(
                    estimate_runtime(node_cost(n), roofline_profile, hints) for n in nodes
                ),
                measured_seconds=statistics.mean(measured.seconds[n] for n in nodes),
                in_step_seconds=statistics.mean(clock.seconds[key]),
            )
        )
    return errors


def _op_key(target: object, shapes: Sequence[tuple[int, ...]]) -> str:
    """An op and the shapes of its tensor arguments: ``aten::mm[(1024, 128), (128, 512)]``;
    one format for the joint graph's nodes and the ops timed in the step."""
    return f"{schema_name(target)}{list(shapes)}"


class _OpClock:
    """Runs partitioned graphs op by op and, while ``on``, times each ATen op call alone
    (``perf_counter`` around it), per :func:`_op_key`; a replayed random op counts as the op
    it replays. Unlike ``torch.profiler``, which on the benchmark machine made the step 7x
    slower and its pointwise ops up to 10x, it adds nothing inside the timed call."""

    def __init__(self) -> None:
        self.on = False
        self.seconds: dict[str, list[float]] = {}

    def runner(self, gm: fx.GraphModule, phase: str) -> Callable[..., object]:
        clock = self

        class Timed(fx.Interpreter):
            def call_function(self, target, args, kwargs):  # type: ignore[no-untyped-def]
                start = time.perf_counter()
                out = target(*args, **kwargs)
                seconds = time.perf_counter() - start
                if clock.on:
                    if target is ti.run_and_save_rng_state:
                        target, args = args[0], args[1:]
                    elif target is ti.run_with_rng_state:
                        target, args = args[1], args[2:]
                    if is_op_overload(target):
                        shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
                        clock.seconds.setdefault(_op_key(target, shapes), []).append(seconds)
                return out

        return lambda *args: Timed(gm).run(*args)


def _hinted(shape: Sequence[object], hints: SizeHints) -> list[int]:
    return [s if isinstance(s, int) else hints.evaluate(s.node.expr) for s in shape]  # type: ignore[union-attr]


# -- 3. fusion error -----------------------------------------------------------------------


def _chains(size: str) -> dict[str, tuple[Callable[..., torch.Tensor], list[tuple[int, ...]]]]:
    """Pointwise chains the models' backward recomputes, at the models' sizes."""
    s = SHAPES[size]
    rows = s.batch * s.seq
    return {
        "gelu (nanoGPT MLP)": (
            lambda x: x * 0.5 * (1.0 + torch.erf(x * 0.7071067811865476)),
            [(rows, 4 * s.dim)],
        ),
        "layer norm apply": (
            lambda x, mean, rstd, w, b: (x - mean) * rstd * w + b,
            [(rows, s.dim), (rows, 1), (rows, 1), (s.dim,), (s.dim,)],
        ),
        "softmax apply": (
            lambda x, amax, total: torch.exp(x - amax) / total,
            [
                (s.batch * s.heads * s.seq, s.seq),
                (s.batch * s.heads * s.seq, 1),
                (s.batch * s.heads * s.seq, 1),
            ],
        ),
        "silu * up (Llama MLP)": (
            lambda x, up: x * torch.sigmoid(x) * up,
            [(rows, s.hidden), (rows, s.hidden)],
        ),
        "rms norm apply": (
            lambda x, ms, w: x * torch.rsqrt(ms + 1e-6) * w,
            [(rows, s.dim), (rows, 1), (s.dim,)],
        ),
    }


def fusion_errors(size: str, rounds: int, cache_dir: Path) -> list[FusionRecord]:
    return [
        _fusion(name, chain, shapes, rounds, cache_dir) for name, (chain, shapes) in _chains(size).items()
    ]


def _fusion(
    name: str, chain: Callable[..., torch.Tensor], shapes: list[tuple[int, ...]], rounds: int, cache_dir: Path
) -> FusionRecord:
    roofline = get_profile("cpu")
    torch.manual_seed(0)
    ins = [torch.rand(shape) + 0.5 for shape in shapes]
    grad = torch.rand(shapes[0])
    saved = chain(*ins)
    gm = make_fx(chain, tracing_mode="fake")(*ins)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    times = measure_op_times(nodes, SizeHints.static(), roofline, fused=set(nodes), cache_dir=cache_dir)
    torch._dynamo.reset()
    with_saved = torch.compile(lambda g, y: g * y, backend="inductor")
    recomputing = torch.compile(lambda g, *xs: g * chain(*xs), backend="inductor")
    calls = {"saved": lambda: with_saved(grad, saved), "recompute": lambda: recomputing(grad, *ins)}
    seconds = _interleaved(calls, rounds)
    delta, iqr = _median_iqr([r - s for r, s in zip(seconds["recompute"], seconds["saved"], strict=True)])
    return FusionRecord(
        chain=name,
        elements=math.prod(shapes[0]),
        measured_delta=delta,
        measured_delta_iqr=iqr,
        estimate_measured=sum(times.seconds.get(n, 0.0) for n in nodes),
        estimate_roofline=sum(estimate_runtime(node_cost(n), roofline, fused=True) for n in nodes),
    )


def _interleaved(
    calls: dict[str, Callable[[], object]], rounds: int, per_round: int = 20
) -> dict[str, list[float]]:
    """Seconds per call, each round ``per_round`` calls of each, in a shuffled order."""
    for fn in calls.values():
        for _ in range(3):
            fn()
    order = list(calls)
    out: dict[str, list[float]] = {name: [] for name in order}
    shuffle = random.Random(0)
    for _ in range(rounds):
        shuffle.shuffle(order)
        for name in order:
            start = time.perf_counter()
            for _ in range(per_round):
                calls[name]()
            out[name].append((time.perf_counter() - start) / per_round)
    return out


# -- 4. profiling time ---------------------------------------------------------------------


def profiling_time(layers: int = 12) -> ProfilingTime:
    """``costing.measure`` on the 12-layer nanoGPT of ``benchmarks.solve_time``: cold, then warm."""
    torch.manual_seed(0)
    cfg = GPTConfig(layers=layers)
    model = GPT(cfg).train()
    inputs = (torch.randint(0, cfg.vocab, (4, cfg.seq)), torch.randint(0, cfg.vocab, (4, cfg.seq)))
    joint = _joint(model, inputs)
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        cold = measure_op_costs(joint, compiler=None, cache_dir=cache, time_limit=60.0).times
        cold_seconds = time.perf_counter() - start
        warm_runs = []
        for _ in range(5):
            start = time.perf_counter()
            warm = measure_op_costs(joint, compiler=None, cache_dir=cache, time_limit=60.0).times
            warm_runs.append(time.perf_counter() - start)
        assert warm.stats.measured == 0 and dict(warm.seconds) == dict(cold.seconds)
    return ProfilingTime(
        layers=layers,
        joint_nodes=len(joint.module.graph.nodes),
        timed_nodes=cold.stats.nodes,
        distinct_ops=cold.stats.distinct,
        cold_seconds=cold_seconds,
        warm_seconds=statistics.median(warm_runs),
        measured=cold.stats.measured,
        failed=cold.stats.failed,
    )


# -- report --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    made = parser("benchmarks.cost_accuracy", __doc__, out=Path("benchmarks/cost_accuracy/results"))
    made.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    made.add_argument("--budgets", default=",".join(str(b) for b in DEFAULT_BUDGETS))
    made.add_argument("--rounds", type=int, default=20)
    made.add_argument("--per-round", type=int, default=3)
    made.add_argument("--threads", type=int, default=1)
    made.add_argument("--size", choices=SIZES, default="full")
    made.add_argument("--no-fusion", action="store_true", help="skip the Inductor fusion section")
    made.add_argument(
        "--report-only", action="store_true", help="tables and plot again from OUT/records.json (no run)"
    )
    args = made.parse_args(argv)
    if args.report_only:
        progress(f"wrote {render(args.out)}")
        return 0
    budgets = [float(b) for b in args.budgets.split(",")]
    torch.set_num_threads(args.threads)
    run = command("benchmarks.cost_accuracy", argv)
    started = time.perf_counter()
    load_before = load_average()
    args.out.mkdir(parents=True, exist_ok=True)
    plans: list[PlanRecord] = []
    errors: list[OpError] = []
    fusion: list[FusionRecord] = []
    with benchmark_settings(), tempfile.TemporaryDirectory() as cache_root:
        cache = Path(cache_root)
        with ti.dynamo_config.patch(recompile_limit=256, accumulated_recompile_limit=4096):
            for name in args.models:
                progress(f"{name}: compiling and timing plans")
                records, model, inputs = measure_plans(
                    name, args.size, budgets, args.rounds, cache, args.per_round
                )
                plans += records
                progress(f"{name}: per-op error")
                errors += op_errors(name, model, inputs, cache)
                torch._dynamo.reset()
        if not args.no_fusion:
            progress("fusion chains (Inductor)")
            fusion = fusion_errors(args.size, args.rounds, cache)
        progress("profiling time (12-layer nanoGPT)")
        timing = profiling_time()
    meta = {
        "command": run,
        "machine": machine(),
        "threads": args.threads,
        "size": args.size,
        "rounds": args.rounds,
        "per_round": args.per_round,
        "git": git_state(),
        "code_hash": code_hash()[:12],
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_minutes": round((time.perf_counter() - started) / 60, 1),
        "load_average": [load_before, load_average()],
    }
    data = {
        "meta": meta,
        "plans": [asdict(p) for p in plans],
        "op_errors": [asdict(e) for e in errors],
        "fusion": [asdict(f) for f in fusion],
        "profiling_time": asdict(timing),
    }
    (args.out / "records.json").write_text(json.dumps(data, indent=1))
    plot(plans, errors, args.out / "cost_accuracy.png")
    write_results(meta, plans, errors, fusion, timing, args.out / "RESULTS.md")
    progress(f"wrote {args.out}")
    return 0
