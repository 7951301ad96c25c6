"""Device profiles: the peak rates a roofline needs.

Shipped profiles use vendor data-sheet figures for *dense* (non-sparse) math:

=========  ==========  ==========  ========  ========  ===========  =========
profile    bf16/fp16   tf32        fp32      fp8/int8  HBM          NVLink
=========  ==========  ==========  ========  ========  ===========  =========
h100       989.4 T     494.7 T     66.9 T    1978.9 T  3.35 TB/s    900 GB/s
h200       989.4 T     494.7 T     66.9 T    1978.9 T  4.8 TB/s     900 GB/s
a100       312 T       156 T       19.5 T    624 T i8  2.039 TB/s   600 GB/s
=========  ==========  ==========  ========  ========  ===========  =========

(H100/H200: SXM parts; A100: SXM 80GB. fp64 uses the FP64 tensor-core rate.)

Host link (``device_to_host_bandwidth`` / ``host_to_device_bandwidth``, bytes/s, what an
activation offloaded to host memory moves over; ``None``: no link, nothing is offloaded):

=========  ==========  ==========  ============================================
profile    D2H         H2D         source
=========  ==========  ==========  ============================================
h100       55 GB/s     55 GB/s     PCIe gen5 x16, measured pinned copies (~55 of
                                   64 GB/s raw; NVIDIA H100 data sheet, PCIe gen5)
h200       55 GB/s     55 GB/s     same host interface as the H100 (PCIe gen5)
gh200      295 GB/s    342 GB/s    NVLink-C2C, measured (NVIDIA GH200 Grace Hopper
                                   Superchip Architecture whitepaper: 900 GB/s raw;
                                   measured D2H ~295, H2D ~342 GB/s by
                                   ``cudaMemcpyAsync`` of pinned buffers)
a100       25 GB/s     25 GB/s     PCIe gen4 x16, measured (~25 of 32 GB/s raw)
cpu        None        None        no separate host tier
=========  ==========  ==========  ============================================

``calibrate("cuda")`` measures both directions with pinned host buffers.

TF32: an fp32 GEMM runs at the TF32 rate only if the user allowed it
(``torch.backends.cuda.matmul.allow_tf32`` / ``set_float32_matmul_precision("high")``);
PyTorch's default is "highest", i.e. true fp32. So profiles default to ``use_tf32=False``
and fp32 GEMMs are costed at the fp32 rate; ``profile.with_tf32()`` switches. The choice
is a field, not read from global state, so it is part of the profile's fingerprint (and
of any compile-cache key built from it).

Non-matrix work (pointwise, reductions) runs on the vector units: ``vector_flops``
(default: the fp32 rate). ``kernel_overhead`` is the fixed cost of one kernel launch
(Python-side Triton launch, about 5 us). The "cpu" profile is a deliberately modest
generic machine (8 AVX2 cores: 0.5 TFLOP/s fp32/bf16, 50 GB/s DRAM, 10 us per op); for
anything real, use :func:`cost_model.calibrate`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import torch


@dataclass(frozen=True)
class DeviceProfile:
    """Peak rates of one device; immutable and hashable (see :meth:`fingerprint`)."""

    name: str
    peak_flops: Mapping[torch.dtype, float]  # dense matrix-unit FLOP/s per operand dtype
    memory_bandwidth: float  # bytes/s
    kernel_overhead: float  # seconds per kernel launch
    tf32_flops: float | None = None  # FLOP/s of an fp32 GEMM in TF32 mode
    use_tf32: bool = False
    vector_flops: float | None = None  # FLOP/s of non-matrix work; None: the fp32 rate
    interconnect_bandwidth: float | None = None  # bytes/s for collectives; None: memory_bandwidth
    # The host link, per direction (bytes/s): what offloading an activation costs; None: no link.
    device_to_host_bandwidth: float | None = None
    host_to_device_bandwidth: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"DeviceProfile.name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.peak_flops, Mapping) or not self.peak_flops:
            raise ValueError(f"{self.name}: peak_flops must be a non-empty mapping dtype -> FLOP/s")
        for dtype, rate in self.peak_flops.items():
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"{self.name}: peak_flops keys must be torch.dtype, got {dtype!r}")
            _check_rate(self.name, f"peak_flops[{dtype}]", rate)
        _check_rate(self.name, "memory_bandwidth", self.memory_bandwidth)
        _check_rate(self.name, "kernel_overhead", self.kernel_overhead, allow_zero=True)
        rates_or_none = (
            "tf32_flops",
            "vector_flops",
            "interconnect_bandwidth",
            "device_to_host_bandwidth",
            "host_to_device_bandwidth",
        )
        for field in rates_or_none:
            if getattr(self, field) is not None:
                _check_rate(self.name, field, getattr(self, field))
        frozen = MappingProxyType({d: float(r) for d, r in self.peak_flops.items()})
        object.__setattr__(self, "peak_flops", frozen)

    def matmul_flops(self, dtype: torch.dtype | None) -> float:
        """FLOP/s of a GEMM/conv/attention with operands of ``dtype``.

        fp32 uses the TF32 rate when ``use_tf32``; a dtype the profile lacks (ints, bool,
        complex, None) falls back to the fp32 rate, or the slowest rate listed.
        """
        if dtype == torch.float32 and self.use_tf32 and self.tf32_flops is not None:
            return self.tf32_flops
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]  # type: ignore[index]
        return self._fp32_rate()

    def vector_rate(self) -> float:
        """FLOP/s of non-matrix work (pointwise, reductions)."""
        return self.vector_flops if self.vector_flops is not None else self._fp32_rate()

    def collective_bandwidth(self) -> float:
        """Bytes/s for collectives."""
        return self.interconnect_bandwidth or self.memory_bandwidth

    @property
    def has_host_link(self) -> bool:
        """Whether activations can be offloaded to host memory (both directions known)."""
        return self.device_to_host_bandwidth is not None and self.host_to_device_bandwidth is not None

    def with_tf32(self, enabled: bool = True) -> DeviceProfile:
        """This profile with fp32 GEMMs at the TF32 rate (or not)."""
        return dataclasses.replace(self, use_tf32=enabled)

    def fingerprint(self) -> str:
        """A stable digest of every field, for cache keys (e.g. a partitioner's ``uuid``)."""
        rates = sorted((str(d), r) for d, r in self.peak_flops.items())
        text = repr(
            (
                self.name,
                rates,
                self.memory_bandwidth,
                self.kernel_overhead,
                self.tf32_flops,
                self.use_tf32,
                self.vector_flops,
                self.interconnect_bandwidth,
                self.device_to_host_bandwidth,
                self.host_to_device_bandwidth,
            )
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __deepcopy__(self, memo: dict[int, object]) -> DeviceProfile:
        # Immutable, so a copy is itself. Inductor deep-copies its config (our partitioner,
        # its options and their profile among it) for every compile's repro string, and
        # the read-only ``peak_flops`` mapping cannot be copied.
        return self

    def _fp32_rate(self) -> float:
        return self.peak_flops.get(torch.float32) or min(self.peak_flops.values())


def _check_rate(name: str, field: str, value: object, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):  # type: ignore[operator]
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: {field} must be a finite number {bound}, got {value!r}")


def _nvidia(
    name: str,
    *,
    half: float,
    tf32: float,
    fp32: float,
    fp64: float,
    fp8: float | None,
    int8: float,
    bandwidth: float,
    nvlink: float,
    host_link: tuple[float, float],
) -> DeviceProfile:
    rates = {
        torch.bfloat16: half,
        torch.float16: half,
        torch.float32: fp32,
        torch.float64: fp64,
        torch.int8: int8,
    }
    if fp8 is not None:
        rates.update({torch.float8_e4m3fn: fp8, torch.float8_e5m2: fp8})
    return DeviceProfile(
        name,
        rates,
        bandwidth,
        5e-6,
        tf32_flops=tf32,
        vector_flops=fp32,
        interconnect_bandwidth=nvlink,
        device_to_host_bandwidth=host_link[0],
        host_to_device_bandwidth=host_link[1],
    )


_H100 = _nvidia(
    "h100",
    half=989.4e12,
    tf32=494.7e12,
    fp32=66.9e12,
    fp64=66.9e12,
    fp8=1978.9e12,
    int8=1978.9e12,
    bandwidth=3.35e12,
    nvlink=900e9,
    host_link=(55e9, 55e9),  # PCIe gen5 x16, measured
)

PROFILES: Mapping[str, DeviceProfile] = MappingProxyType(
    {
        "h100": _H100,
        # The H200 is an H100 die with more, faster HBM: same compute, more bandwidth.
        "h200": dataclasses.replace(_H100, name="h200", memory_bandwidth=4.8e12),
        # Grace Hopper: an H200-class GPU (96 GB HBM3 at 4 TB/s) whose host link is
        # NVLink-C2C, measured 295 GB/s D2H and 342 GB/s H2D (see the table above).
        "gh200": dataclasses.replace(
            _H100,
            name="gh200",
            memory_bandwidth=4.0e12,
            device_to_host_bandwidth=295e9,
            host_to_device_bandwidth=342e9,
        ),
        "a100": _nvidia(
            "a100",
            half=312e12,
            tf32=156e12,
            fp32=19.5e12,
            fp64=19.5e12,
            fp8=None,
            int8=624e12,
            bandwidth=2.039e12,
            nvlink=600e9,
            host_link=(25e9, 25e9),  # PCIe gen4 x16, measured
        ),
        "cpu": DeviceProfile(
            "cpu",
            {torch.float32: 0.5e12, torch.bfloat16: 0.5e12, torch.float16: 0.25e12, torch.float64: 0.25e12},
            memory_bandwidth=50e9,
            kernel_overhead=10e-6,
            interconnect_bandwidth=10e9,
        ),
    }
)


def get_profile(profile: str | DeviceProfile) -> DeviceProfile:
    """A shipped profile by (case-insensitive) name, or ``profile`` itself if it is one."""
    if isinstance(profile, DeviceProfile):
        return profile
    if isinstance(profile, str) and profile.strip().lower() in PROFILES:
        return PROFILES[profile.strip().lower()]
    valid = ", ".join(repr(n) for n in PROFILES)
    raise ValueError(f"unknown device profile {profile!r}: use one of {valid} or a DeviceProfile")
