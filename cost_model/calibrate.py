"""Measure the current device and return a :class:`DeviceProfile`.

Three microbenchmarks, best of ``repeats`` timed runs after one warm-up:
- GEMM FLOP/s: ``size x size @ size x size`` per float dtype (``2 * size**3`` FLOPs);
  fp32 is measured under the current ``float32_matmul_precision``, so a TF32-enabled
  process gets its TF32 rate as the fp32 rate;
- copy bandwidth: ``dst.copy_(src)`` of a large buffer, counting read + write bytes;
- kernel overhead: the mean time of a tiny ``add`` (launch + dispatch);
- on CUDA, the host link per direction (what offloading an activation moves over):
  ``copy_(non_blocking=True)`` between a device buffer and a pinned host buffer, one way
  each (``device_to_host_bandwidth``, ``host_to_device_bandwidth``). Skipped on CPU,
  which has no separate host tier.

On CPU the defaults (512^2 GEMMs, 32 MiB copies, fp32 and bf16) take well under 2 s;
fp16 GEMMs are skipped on CPU because most CPUs emulate them slowly.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence

import torch

from .device import DeviceProfile

logger = logging.getLogger(__name__)

_CPU_DTYPES = (torch.float32, torch.bfloat16)
_GPU_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def calibrate(
    device: str | torch.device = "cpu",
    *,
    size: int | None = None,
    repeats: int = 3,
    copy_bytes: int | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
) -> DeviceProfile:
    """Profile of ``device`` from measured GEMM FLOP/s, copy bandwidth and launch overhead."""
    dev = torch.device(device)
    if size is not None and size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    is_cpu = dev.type == "cpu"
    size = size or (512 if is_cpu else 4096)
    copy_bytes = copy_bytes or (32 << 20 if is_cpu else 1 << 30)
    dtypes = tuple(dtypes) if dtypes is not None else (_CPU_DTYPES if is_cpu else _GPU_DTYPES)
    sync = synchronizer(dev)

    peak: dict[torch.dtype, float] = {}
    for dtype in dtypes:
        try:
            peak[dtype] = _gemm_rate(dev, dtype, size, repeats, sync)
        except (RuntimeError, TypeError) as exc:  # dtype unsupported on this device
            logger.info("calibrate: skipping %s on %s: %s", dtype, dev, exc)
    if not peak:
        raise RuntimeError(f"calibrate: no GEMM dtype could be measured on {dev}")
    bandwidth = _copy_bandwidth(dev, copy_bytes, repeats, sync)
    overhead = _launch_overhead(dev, sync)
    d2h, h2d = _host_link(dev, copy_bytes, repeats, sync) if dev.type == "cuda" else (None, None)
    logger.info(
        "calibrate %s: peak %s FLOP/s, %.3g B/s, %.3g s/kernel, host link D2H %s H2D %s B/s",
        dev,
        peak,
        bandwidth,
        overhead,
        d2h,
        h2d,
    )
    return DeviceProfile(
        f"calibrated-{dev}",
        peak,
        bandwidth,
        overhead,
        device_to_host_bandwidth=d2h,
        host_to_device_bandwidth=h2d,
    )


def synchronizer(dev: torch.device) -> Callable[[], None]:
    """A function that waits for the device's queued work (no-op on CPU)."""
    if dev.type == "cpu":
        return lambda: None
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    module = getattr(torch, dev.type, None)
    sync = getattr(module, "synchronize", None)
    if sync is None:
        raise ValueError(f"calibrate: don't know how to synchronize device type {dev.type!r}")
    return lambda: sync()


def _best_time(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    fn()
    sync()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def _gemm_rate(
    dev: torch.device, dtype: torch.dtype, size: int, repeats: int, sync: Callable[[], None]
) -> float:
    a = torch.randn(size, size, device=dev, dtype=dtype)
    b = torch.randn(size, size, device=dev, dtype=dtype)
    out = torch.empty(size, size, device=dev, dtype=dtype)
    seconds = _best_time(lambda: torch.mm(a, b, out=out), repeats, sync)
    return 2.0 * size**3 / seconds


def _copy_bandwidth(dev: torch.device, nbytes: int, repeats: int, sync: Callable[[], None]) -> float:
    numel = max(nbytes // 4, 1)
    src = torch.ones(numel, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    seconds = _best_time(lambda: dst.copy_(src), repeats, sync)
    return 2.0 * numel * 4 / seconds  # read + write


def _launch_overhead(dev: torch.device, sync: Callable[[], None], iterations: int = 200) -> float:
    x = torch.zeros(1, device=dev)
    out = torch.empty_like(x)
    torch.add(x, 1, out=out)
    sync()
    start = time.perf_counter()
    for _ in range(iterations):
        torch.add(x, 1, out=out)
    sync()
    return max((time.perf_counter() - start) / iterations, 1e-9)


def _host_link(dev: torch.device, nbytes: int, repeats: int, sync: Callable[[], None]) -> tuple[float, float]:
    """Bytes/s device -> pinned host and pinned host -> device (one way each): the rates
    ``torch.ops.ao.offload`` / ``ao.reload`` copy at, on their own stream."""
    numel = max(nbytes // 4, 1)
    device_buffer = torch.ones(numel, device=dev, dtype=torch.float32)
    host_buffer = torch.empty(numel, dtype=torch.float32, pin_memory=True)
    d2h = _best_time(lambda: host_buffer.copy_(device_buffer, non_blocking=True), repeats, sync)
    h2d = _best_time(lambda: device_buffer.copy_(host_buffer, non_blocking=True), repeats, sync)
    return numel * 4 / d2h, numel * 4 / h2d
