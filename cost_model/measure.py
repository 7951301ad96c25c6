"""Measured op times: each distinct op of a graph timed once on its device, cached on disk.

Why: the roofline prices an op from data-sheet peaks, and real kernels reach a fraction of
them that depends on the op, its shapes and the machine (a small GEMM on a CPU, a
launch-bound pointwise kernel). Timing every op once, at the shapes the graph will run,
replaces the guess with the clock where it matters, and a disk cache makes it a one-time
cost per machine.

What is timed, per node (an ATen/prims op; views, SymInt arithmetic, collectives and
higher-order ops are not timed, nor ops with data-dependent sizes):

- kernel mode: the op alone, at its shapes (at the size hints), strides, dtypes and device,
  on inputs of random values in [0.5, 1.5) (integer tensors are zero, so any index is
  valid; bools random). Two warm-up calls, then ``repeats`` rounds, each of enough calls to
  last ``MIN_ROUND_SECONDS``; the fastest round's time per call, as ``calibrate`` takes
  (a slower round was disturbed: another process, a page fault, a burst of memory traffic
  on a shared machine; on the 2-core VM the benchmarks run on, the median of 5 rounds of a
  memory-bound op moved by up to 30x between two runs, the fastest round by under 2x). As
  in a step, inputs come from memory, not cache (calls rotate over copies of them,
  ``_cold_copies``), and outputs land in memory not in cache (held until the round is
  timed, ``_per_call``). The same quantity as the roofline's unfused estimate: launch,
  memory traffic and arithmetic.
- fused mode (pointwise ops the caller says run inside a neighbour's kernel): only the
  op's arithmetic, the roofline's ``fused=True`` quantity. Measured per op, as the extra
  time per element over a copy: the slope of the op's time between two cache-resident
  sizes below the CPU's parallel grain, minus the slope of ``clone``, times the output's
  elements (divided by the threads when the output is big enough for the kernel to run
  in parallel). An approximation of what Inductor's fused kernel spends on the op;
  ``benchmarks/cost_accuracy.py`` measures its error against real fused kernels.

Every draw runs under ``fork_rng`` with a fixed seed: profiling never moves the caller's
generator (a compile between ``manual_seed`` and a dropout draw must not change its mask).

Cache: one JSON file per device name (CPU model and thread count, or GPU name) and torch
version, under ``cache_dir`` (argument, else ``$TORCH_RECOMPUTE_CACHE_DIR``, else
``$XDG_CACHE_HOME/torch_recompute`` or ``~/.cache/torch_recompute``), keyed by the op's
signature: mode, op name, and per argument its sizes, strides, dtype and device, or its
value. Ops that cannot run on made-up inputs are cached as failed. The file also holds the
device's :func:`~cost_model.calibrate` profile, which prices what is not timed (roofline
fallback) and the memory traffic of saving. Writes merge with what is on disk, entries
already there win, and the file is replaced atomically: processes sharing a cache agree.

Time limit: seconds of op timing per call (calibrating the device, under a second on CPU
and once per cache, is not counted; with a limit of 0 it is skipped too). The most
expensive ops by the roofline are timed first; what is left is absent from the result, so
the roofline prices it. ``0`` times nothing: only what the cache holds counts. The limit
is checked between rounds, so one op's warm-up and round can overrun it.

Determinism: the values used are the values written, and JSON floats round-trip exactly,
so two processes reading one cache get the same times, hence the same plan.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import os
import platform
import re
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
from torch import fx

from ._log import log_once
from .calibrate import calibrate, synchronizer
from .device import DeviceProfile
from .hints import SizeHints
from .kinds import OpKind, classify, op_name
from .node_cost import node_cost
from .runtime import estimate_runtime
from .torch_internals import free_unbacked_symbols, is_op_overload, sym_expr, unset_fake_temporarily

logger = logging.getLogger(__name__)

CACHE_ENV = "TORCH_RECOMPUTE_CACHE_DIR"
MIN_ROUND_SECONDS = 1e-3  # one round of calls: long enough for the clock, short for the limit
MAX_CALLS_PER_ROUND = 10_000
HOLD_BYTES = 256 << 20  # outputs held alive per round, at most (see ``_per_call``)
COLD_BYTES = 64 << 20  # inputs rotated over copies spanning this, to come from memory
MAX_COPIES = 16
CPU_GRAIN = 32_768  # ATen's parallel grain: smaller pointwise kernels run on one thread
_FUSED_SIZES = {"cpu": (2_048, 16_384), "cuda": (1 << 20, 1 << 23)}  # elements, per device type
_FORMAT = 2  # 2: fastest round, not the median
_UNTIMED = frozenset({OpKind.NONE, OpKind.VIEW, OpKind.COLLECTIVE})


class Unmeasurable(Exception):
    """The node cannot be timed on made-up inputs (not an op, data-dependent sizes...)."""


@dataclass(frozen=True)
class ProfilingStats:
    """What one :func:`measure_op_times` call did; every count is of distinct signatures
    except ``nodes`` and ``unmeasurable``."""

    nodes: int  # nodes asked for
    distinct: int  # distinct signatures among them
    cached: int  # found in the cache (failed ones included)
    measured: int  # timed by this call
    failed: int  # could not run (now or before): roofline
    timed_out: int  # left untimed by the time limit: roofline
    unmeasurable: int  # nodes without a signature: roofline
    seconds: float  # wall time of the call
    calibrated: bool  # the device profile was measured by this call


@dataclass(frozen=True)
class OpTimes:
    """Seconds per node; a node absent from ``seconds`` was not timed (roofline fallback)."""

    profile: DeviceProfile  # the calibrated profile (or the fallback one, if none is cached)
    seconds: Mapping[fx.Node, float]
    stats: ProfilingStats
    cache_file: Path


def default_cache_dir() -> Path:
    """``$TORCH_RECOMPUTE_CACHE_DIR``, else the user cache dir's ``torch_recompute``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "torch_recompute"


def device_name(device: torch.device) -> str:
    """What a timing depends on: the GPU's name, or the CPU model and torch's thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return f"{_cpu_model()} x{torch.get_num_threads()} threads"
    return device.type


def cache_file(device: torch.device, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache file for ``device`` and this torch version."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    slug = re.sub(r"[^A-Za-z0-9.+-]+", "_", f"{device_name(device)}__torch-{torch.__version__}")
    return root / "op_times" / f"{slug}.json"


def measure_op_times(
    nodes: Sequence[fx.Node],
    hints: SizeHints,
    fallback: DeviceProfile,
    *,
    fused: Collection[fx.Node] = frozenset(),
    cache_dir: str | os.PathLike[str] | None = None,
    time_limit: float = 10.0,
    repeats: int = 5,
) -> OpTimes:
    """Seconds for each of ``nodes`` (``fused`` ones: their fused arithmetic), from the cache
    or timed now; see the module docstring. Never raises for a node it cannot time.

    ``fallback`` is the profile used when no calibrated one is cached and the limit leaves
    no time to calibrate.
    """
    if isinstance(time_limit, bool) or not time_limit >= 0 or math.isinf(time_limit):
        raise ValueError(f"time_limit must be a finite number >= 0, got {time_limit!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    start = time.perf_counter()
    signatures: dict[fx.Node, str] = {}
    unmeasurable = 0
    specs: dict[fx.Node, str] = {}
    for node in nodes:
        try:
            signatures[node] = signature(node, hints, fused=node in fused, _specs=specs)
        except Unmeasurable as why:
            unmeasurable += 1
            log_once(logger, logging.INFO, "not timed, roofline used", str(node.target), str(why))
    device = _device_of(signatures) or torch.device("cpu")
    path = cache_file(device, cache_dir)
    stored = _read(path)
    times: dict[str, float | None] = dict(stored.get("times", {}))
    update: dict[str, Any] = {}
    if stored.get("profile") is None and time_limit > 0:
        try:
            update["profile"] = _profile_json(_calibrate(device))
        except Exception as error:  # the roofline's data-sheet profile will do
            log_once(
                logger, logging.WARNING, "calibration failed, fallback profile used", str(device), repr(error)
            )
    calibrated = bool(update)
    deadline = time.perf_counter() + time_limit  # calibrating, once per cache, is not counted

    todo = _by_estimate({n: s for n, s in signatures.items() if s not in times}, hints, fallback)
    new_times: dict[str, float | None] = {}
    timed_out = 0
    for sig, node in todo:
        if time.perf_counter() >= deadline:
            timed_out += 1
            continue
        try:
            seconds = _measure(node, hints, fused=node in fused, repeats=repeats, deadline=deadline)
        except Exception as error:  # an op that cannot run on made-up inputs
            log_once(logger, logging.INFO, "timing failed, roofline used", sig, repr(error)[:200])
            seconds = None
        else:
            if seconds is None:  # the limit fell during its rounds
                timed_out += 1
                continue
        new_times[sig] = seconds
    if update or new_times:
        # Entries another process wrote first win: use what the cache now holds.
        stored = _write(path, device_name(device), {**update, "times": new_times})
        times.update({k: stored["times"].get(k, v) for k, v in new_times.items()})
    profile = _profile_from(stored.get("profile") or update.get("profile")) or fallback
    distinct = set(signatures.values())
    stats = ProfilingStats(
        nodes=len(nodes),
        distinct=len(distinct),
        cached=len(distinct) - len(todo),
        measured=sum(v is not None for v in new_times.values()),
        failed=sum(s in times and times[s] is None for s in distinct),
        timed_out=timed_out,
        unmeasurable=unmeasurable,
        seconds=time.perf_counter() - start,
        calibrated=calibrated,
    )
    if timed_out:
        logger.warning(
            "cost_model: profiling time limit (%gs) reached: %d of %d ops priced by the roofline",
            time_limit,
            timed_out,
            len(distinct),
        )
    seconds_by_node = {n: times[s] for n, s in signatures.items() if times.get(s) is not None}
    return OpTimes(profile, MappingProxyType(seconds_by_node), stats, path)  # type: ignore[arg-type]


# -- signatures ------------------------------------------------------------------------------


def signature(
    node: fx.Node, hints: SizeHints, *, fused: bool = False, _specs: dict[fx.Node, str] | None = None
) -> str:
    """The cache key of ``node``'s timing: mode, op, and each argument's layout or value.

    Raises :class:`Unmeasurable` for what is not timed.
    """
    if node.op != "call_function" or not is_op_overload(node.target):
        raise Unmeasurable("not an ATen/prims op")
    kind = classify(node)
    if kind in _UNTIMED or kind is OpKind.UNKNOWN:
        raise Unmeasurable(f"{kind.value} op")
    specs = _specs if _specs is not None else {}
    args = ", ".join(_arg_spec(a, hints, specs) for a in node.args)
    kwargs = ", ".join(f"{k}={_arg_spec(v, hints, specs)}" for k, v in sorted(node.kwargs.items()))
    mode = "fused" if fused else "kernel"
    return f"{mode}:{op_name(node.target)}({args}{'; ' + kwargs if kwargs else ''})"


def _arg_spec(value: object, hints: SizeHints, specs: dict[fx.Node, str]) -> str:
    if isinstance(value, fx.Node):
        if value not in specs:
            specs[value] = _value_spec(value.meta.get("val"), hints)
        return specs[value]
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_arg_spec(v, hints, specs) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return _value_spec(value, hints)


def _value_spec(value: object, hints: SizeHints) -> str:
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            raise Unmeasurable(f"{value.layout} tensor")
        sizes = ",".join(str(_int(s, hints)) for s in value.shape)
        strides = ",".join(str(_int(s, hints)) for s in value.stride())
        return f"{str(value.dtype).removeprefix('torch.')}[{sizes}]/[{strides}]@{value.device.type}"
    if isinstance(value, torch.SymInt):
        return str(_int(value, hints))
    if isinstance(value, (torch.SymFloat, torch.SymBool)):
        raise Unmeasurable("symbolic float/bool argument")
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        return repr(value)
    if isinstance(value, (torch.memory_format, torch.layout)):
        return str(value)
    raise Unmeasurable(f"argument of type {type(value).__name__}")


def _int(value: int | torch.SymInt, hints: SizeHints) -> int:
    if isinstance(value, int):
        return value
    if free_unbacked_symbols(value):
        raise Unmeasurable("data-dependent size")
    return hints.evaluate(sym_expr(value))


def _device_of(signatures: Mapping[fx.Node, str]) -> torch.device | None:
    for node in signatures:
        for arg in node.all_input_nodes:
            val = arg.meta.get("val")
            if isinstance(val, torch.Tensor):
                return val.device
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            return val.device
    return None


def _by_estimate(
    todo: Mapping[fx.Node, str], hints: SizeHints, profile: DeviceProfile
) -> list[tuple[str, fx.Node]]:
    """Distinct signatures, most expensive first by the roofline (then by signature), so a
    time limit leaves the cheapest to the roofline."""
    first: dict[str, fx.Node] = {}
    for node, sig in todo.items():
        first.setdefault(sig, node)
    estimate = {sig: estimate_runtime(node_cost(n), profile, hints) for sig, n in first.items()}
    return [(sig, first[sig]) for sig in sorted(first, key=lambda s: (-estimate[s], s))]


# -- timing ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _isolated(device: torch.device) -> Iterator[None]:
    """Real tensors, no autograd, and the caller's generators untouched."""
    cuda = [device.index or 0] if device.type == "cuda" else []
    with unset_fake_temporarily(), torch.no_grad(), torch.random.fork_rng(devices=cuda):
        torch.manual_seed(0)
        yield


def _measure(node: fx.Node, hints: SizeHints, *, fused: bool, repeats: int, deadline: float) -> float | None:
    """Seconds per call of ``node``'s op (kernel mode) or of its arithmetic (fused mode);
    None if the deadline fell first."""
    device = _device_of({node: ""}) or torch.device("cpu")
    sync = synchronizer(device)
    target: Callable[..., Any] = node.target  # type: ignore[assignment]
    with _isolated(device):
        if not fused:
            copies = _cold_copies(*_materialize(node, hints, device))
            turn = itertools.cycle(copies)

            def call() -> object:
                args, kwargs = next(turn)
                return target(*args, **kwargs)

            return _per_call(call, sync, repeats, deadline, hold=True)
        return _fused_arithmetic(node, hints, device, sync, repeats, deadline)


def _per_call(
    fn: Callable[[], object],
    sync: Callable[[], None],
    repeats: int,
    deadline: float,
    *,
    hold: bool = False,
) -> float | None:
    """Seconds per call in the fastest of ``repeats`` rounds, after two warm-up calls.

    ``hold``: every output of a round stays alive until the round is timed, so each call
    writes memory that is not in cache, as in a step, where outputs outlive the op that
    makes them. (Discarding them times a loop that rewrites one warm buffer: on the
    benchmark's nanoGPT, the backward's extra time at budget 0 was 50 ms; held outputs
    estimated its recomputation at 47 ms, discarded ones at 35 ms.)
    """
    out = fn()
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    once = max(time.perf_counter() - t0, 1e-7)
    calls = max(1, min(MAX_CALLS_PER_ROUND, math.ceil(MIN_ROUND_SECONDS / once)))
    if hold:
        calls = max(1, min(calls, HOLD_BYTES // max(_nbytes(out), 1)))
    del out
    rounds = []
    for _ in range(repeats):
        if time.perf_counter() >= deadline:
            return None
        held: list[object] = []
        keep = held.append if hold else _discard
        t0 = time.perf_counter()
        for _ in range(calls):
            keep(fn())
        sync()
        rounds.append((time.perf_counter() - t0) / calls)
        del held
    return min(rounds)


def _discard(value: object) -> None:
    del value


def _nbytes(value: object) -> int:
    if isinstance(value, torch.Tensor):
        return value.untyped_storage().nbytes()
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    return 0


def _fused_arithmetic(
    node: fx.Node,
    hints: SizeHints,
    device: torch.device,
    sync: Callable[[], None],
    repeats: int,
    deadline: float,
) -> float | None:
    """Seconds of the op's arithmetic inside a fused kernel (see the module docstring)."""
    small, large = _FUSED_SIZES.get(device.type, _FUSED_SIZES["cuda"])
    slopes = []
    for make in (lambda n: _flat_call(node, hints, device, n), lambda n: _clone_call(node, hints, device, n)):
        per_size = []
        for size in (small, large):
            fn = make(size)
            seconds = _per_call(fn, sync, repeats, deadline)
            if seconds is None:
                return None
            per_size.append(seconds)
        slopes.append((per_size[1] - per_size[0]) / (large - small))
    per_element = max(0.0, slopes[0] - slopes[1])
    out = node.meta.get("val")
    numel = _numel(out, hints) if isinstance(out, torch.Tensor) else 1
    parallel = torch.get_num_threads() if device.type == "cpu" and numel > CPU_GRAIN else 1
    return per_element * numel / parallel


def _flat_call(node: fx.Node, hints: SizeHints, device: torch.device, size: int) -> Callable[[], object]:
    """The op on 1-D contiguous inputs of ``size`` elements (single-element tensors stay so:
    they broadcast, as in the graph)."""
    made: dict[fx.Node, torch.Tensor] = {}

    def flat(value: object) -> object:
        val = value.meta.get("val") if isinstance(value, fx.Node) else None
        if isinstance(val, torch.Tensor):
            if value not in made:
                length = 1 if _numel(val, hints) <= 1 else size
                shape = () if val.dim() == 0 else (length,)
                made[value] = _random(val.dtype, device, length).reshape(shape)  # type: ignore[index]
            return made[value]  # type: ignore[index]
        return _concrete(value, hints)

    args = tuple(_map(flat, a) for a in node.args)
    kwargs = {k: _map(flat, v) for k, v in node.kwargs.items()}
    target: Callable[..., Any] = node.target  # type: ignore[assignment]
    return lambda: target(*args, **kwargs)


def _clone_call(node: fx.Node, hints: SizeHints, device: torch.device, size: int) -> Callable[[], object]:
    """A copy of ``size`` elements of the op's first tensor input: loads, stores, dispatch."""
    inputs = [n.meta.get("val") for n in node.all_input_nodes]
    dtype = next((v.dtype for v in inputs if isinstance(v, torch.Tensor)), torch.float32)
    x = _random(dtype, device, size)
    return lambda: torch.ops.aten.clone.default(x)


# -- inputs ----------------------------------------------------------------------------------


def _materialize(
    node: fx.Node, hints: SizeHints, device: torch.device
) -> tuple[tuple[object, ...], dict[str, object]]:
    """Real arguments for ``node``'s op: one tensor per input node, its layout at the hints."""
    made: dict[fx.Node, object] = {}

    def real(value: object) -> object:
        if isinstance(value, fx.Node):
            if value not in made:
                made[value] = _real_value(value.meta.get("val"), hints, device)
            return made[value]
        return _concrete(value, hints)

    args = tuple(_map(real, a) for a in node.args)
    kwargs = {k: _map(real, v) for k, v in node.kwargs.items()}
    return args, kwargs


def _cold_copies(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> list[tuple[tuple[object, ...], dict[str, object]]]:
    """Copies of the arguments, rotated call by call, so that inputs come from memory as
    in a step (where an op reads what another op wrote earlier, and a recomputed op reads
    values saved in the forward) rather than from cache: enough copies to span
    ``COLD_BYTES``, at most ``MAX_COPIES``."""
    tensors: dict[int, torch.Tensor] = {}
    for leaf in (*_leaves(args), *_leaves(tuple(kwargs.values()))):
        if isinstance(leaf, torch.Tensor):
            tensors.setdefault(id(leaf), leaf)
    nbytes = sum(t.untyped_storage().nbytes() for t in tensors.values())
    count = max(1, min(MAX_COPIES, COLD_BYTES // max(nbytes, 1)))
    copies = [(args, kwargs)]
    for _ in range(count - 1):
        fresh = {key: _copy(t) for key, t in tensors.items()}

        def swap(value: object, fresh: dict[int, torch.Tensor] = fresh) -> object:
            return fresh.get(id(value), value) if isinstance(value, torch.Tensor) else value

        copies.append((tuple(_map(swap, a) for a in args), {k: _map(swap, v) for k, v in kwargs.items()}))
    return copies


def _leaves(values: tuple[object, ...]) -> list[object]:
    out: list[object] = []
    for value in values:
        out += _leaves(tuple(value)) if isinstance(value, (list, tuple)) else [value]
    return out


def _copy(tensor: torch.Tensor) -> torch.Tensor:
    """Same values, sizes, strides and offset, in a storage of its own."""
    storage = tensor.untyped_storage().clone()
    return torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(
        storage, tensor.storage_offset(), tensor.shape, tensor.stride()
    )


def _map(fn: Callable[[object], object], value: object) -> object:
    if isinstance(value, tuple):
        return tuple(_map(fn, v) for v in value)
    if isinstance(value, list):
        return [_map(fn, v) for v in value]
    return fn(value)


def _concrete(value: object, hints: SizeHints) -> object:
    if isinstance(value, torch.SymInt):
        return _int(value, hints)
    return value


def _real_value(val: object, hints: SizeHints, device: torch.device) -> object:
    if isinstance(val, torch.Tensor):
        sizes = [_int(s, hints) for s in val.shape]
        strides = [_int(s, hints) for s in val.stride()]
        span = 0 if 0 in sizes else 1 + sum((n - 1) * s for n, s in zip(sizes, strides, strict=True))
        return _random(val.dtype, val.device, span).as_strided(sizes, strides)
    if isinstance(val, torch.SymInt):
        return _int(val, hints)
    if isinstance(val, (int, float, bool)):
        return val
    raise Unmeasurable(f"input of type {type(val).__name__}")


def _random(dtype: torch.dtype, device: torch.device, numel: int) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.empty(numel, device=device).uniform_(0.5, 1.5).to(dtype)
    if dtype == torch.bool:
        return torch.rand(numel, device=device) < 0.5
    if dtype.is_complex:
        raise Unmeasurable("complex tensor")
    return torch.zeros(numel, dtype=dtype, device=device)


def _numel(val: torch.Tensor, hints: SizeHints) -> int:
    return math.prod(_int(s, hints) for s in val.shape)


# -- the cache file --------------------------------------------------------------------------


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        log_once(logger, logging.WARNING, "unreadable op-time cache, ignored", str(path), repr(error))
        return {}
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        return {}
    return data


def _write(path: Path, device: str, update: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``update`` into the file (entries already there win); what it now holds."""
    data = _read(path)
    times = dict(update.get("times", {}))
    times.update(data.get("times", {}))
    merged = {
        "format": _FORMAT,
        "device": device,
        "torch": torch.__version__,
        "profile": data.get("profile") or update.get("profile"),
        "times": dict(sorted(times.items())),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as tmp:
            json.dump(merged, tmp, indent=0)
        os.replace(tmp.name, path)
    except OSError as error:
        log_once(logger, logging.WARNING, "op-time cache not written", str(path), repr(error))
    return merged


def _calibrate(device: torch.device) -> DeviceProfile:
    with _isolated(device):
        return calibrate(device)


def _profile_json(profile: DeviceProfile) -> dict[str, Any]:
    return {
        "name": profile.name,
        "peak_flops": {
            str(d).removeprefix("torch."): r for d, r in sorted(profile.peak_flops.items(), key=str)
        },
        "memory_bandwidth": profile.memory_bandwidth,
        "kernel_overhead": profile.kernel_overhead,
    }


def _profile_from(data: object) -> DeviceProfile | None:
    """The cached profile, rebuilt with exactly its stored numbers (None if absent)."""
    if not isinstance(data, dict):
        return None
    try:
        rates = {getattr(torch, name): float(rate) for name, rate in data["peak_flops"].items()}
        return DeviceProfile(
            data["name"], rates, float(data["memory_bandwidth"]), float(data["kernel_overhead"])
        )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        log_once(logger, logging.WARNING, "bad profile in op-time cache, ignored", "profile", repr(error))
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"
