"""Roofline runtime, device profiles and calibration."""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from cost_model import (
    PROFILES,
    ConcreteCost,
    DeviceProfile,
    OpKind,
    calibrate,
    estimate_runtime,
    get_profile,
    node_cost,
)
from cost_model.kinds import base_name
from tests.support.cost_model_graphs import call_nodes

H100 = PROFILES["h100"]


def _cost(fn, *shapes: tuple[int, ...], dtype: torch.dtype = torch.float32, op: str):
    gm = make_fx(fn, tracing_mode="fake")(*(torch.empty(s, dtype=dtype) for s in shapes))
    return node_cost(next(n for n in call_nodes(gm) if base_name(n.target) == op))


def test_big_gemm_is_compute_bound() -> None:
    n = 8192
    cost = _cost(torch.mm, (n, n), (n, n), dtype=torch.bfloat16, op="mm")
    assert cost.dtype == torch.bfloat16
    compute = 2 * n**3 / 989.4e12
    memory = 3 * n * n * 2 / 3.35e12
    assert compute > 5 * memory
    assert estimate_runtime(cost, "h100") == pytest.approx(compute + 5e-6, rel=1e-12)


def test_pointwise_is_bandwidth_bound() -> None:
    n = 1 << 24
    cost = _cost(torch.add, (n,), (n,), op="add")
    assert cost.kind is OpKind.POINTWISE and cost.flops == n
    memory = 3 * n * 4 / 3.35e12
    assert n / H100.vector_rate() < memory
    assert estimate_runtime(cost, H100) == pytest.approx(memory + 5e-6, rel=1e-12)
    fused = estimate_runtime(cost, H100, fused=True)
    assert fused == pytest.approx(n / 66.9e12, rel=1e-12)  # compute only: no bytes, no launch
    assert fused < memory


def test_tf32_switch_for_fp32_gemms() -> None:
    n = 4096
    cost = _cost(torch.mm, (n, n), (n, n), op="mm")
    default, tf32 = estimate_runtime(cost, H100), estimate_runtime(cost, H100.with_tf32())
    assert default == pytest.approx(2 * n**3 / 66.9e12 + 5e-6)
    assert tf32 == pytest.approx(2 * n**3 / 494.7e12 + 5e-6)
    assert H100.fingerprint() != H100.with_tf32().fingerprint()
    assert hash(H100) == hash(get_profile("H100")) and get_profile(" h100 ") == H100


def test_causal_attention_uses_effective_flops() -> None:
    def attn(causal: bool):
        q = torch.empty(8, 16, 2048, 128, dtype=torch.bfloat16)
        gm = make_fx(
            lambda q: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q, 0.0, causal),
            tracing_mode="fake",
        )(q)
        return node_cost(next(n for n in call_nodes(gm) if "attention" in str(n.target)))

    full, causal = attn(False), attn(True)
    assert full.flops == causal.flops
    ratio = (estimate_runtime(causal, H100) - 5e-6) / (estimate_runtime(full, H100) - 5e-6)
    assert ratio == pytest.approx((2048 + 1) / (2 * 2048))


def test_views_and_empty_take_no_time() -> None:
    gm = make_fx(lambda x: (x.t(), torch.empty_like(x)), tracing_mode="fake")(torch.randn(4, 4))
    for node in call_nodes(gm):
        assert estimate_runtime(node_cost(node), "a100") == 0.0


def test_concrete_costs_and_dtype_fallbacks() -> None:
    cost = ConcreteCost("x", OpKind.GEMM, 10**12, 10**12, 0, 0, torch.int64, False, True)
    assert estimate_runtime(cost, "a100") == pytest.approx(1e12 / 19.5e12 + 5e-6)  # ints: fp32 rate
    assert PROFILES["a100"].matmul_flops(torch.float8_e4m3fn) == 19.5e12
    assert H100.matmul_flops(torch.float8_e4m3fn) == 1978.9e12
    assert H100.matmul_flops(None) == 66.9e12
    unknown = ConcreteCost("custom", OpKind.UNKNOWN, 0, 0, 10**9, 10**9, None, False, False)
    assert estimate_runtime(unknown, H100) == pytest.approx(2e9 / 3.35e12 + 5e-6)


def test_collective_uses_interconnect() -> None:
    cost = ConcreteCost(
        "_c10d_functional.all_reduce.default",
        OpKind.COLLECTIVE,
        0,
        0,
        900 * 10**6,
        900 * 10**6,
        torch.bfloat16,
        False,
        True,
    )
    assert estimate_runtime(cost, H100) == pytest.approx(1e-3 + 5e-6)
    if hasattr(torch.ops, "_c10d_functional") and hasattr(torch.ops._c10d_functional, "all_reduce"):
        from cost_model.kinds import classify_target

        assert classify_target(torch.ops._c10d_functional.all_reduce.default) is OpKind.COLLECTIVE


def test_shipped_profiles_are_data_sheet_numbers() -> None:
    assert set(PROFILES) == {"h100", "h200", "gh200", "a100", "cpu"}
    h100, h200, a100 = PROFILES["h100"], PROFILES["h200"], PROFILES["a100"]
    for p in (h100, h200):
        assert p.peak_flops[torch.bfloat16] == p.peak_flops[torch.float16] == 989.4e12
        assert p.tf32_flops == 494.7e12 and p.peak_flops[torch.float32] == 66.9e12
    assert h100.memory_bandwidth == 3.35e12 and h200.memory_bandwidth == 4.8e12
    assert a100.peak_flops[torch.bfloat16] == 312e12 and a100.tf32_flops == 156e12
    assert a100.peak_flops[torch.float32] == 19.5e12 and a100.memory_bandwidth == 2.039e12
    assert not any(p.use_tf32 for p in PROFILES.values())
    cpu = PROFILES["cpu"]
    assert 0 < cpu.peak_flops[torch.float32] < a100.peak_flops[torch.float32]
    assert cpu.memory_bandwidth < a100.memory_bandwidth
    # Host links (offload): PCIe gen5 on H100/H200, NVLink-C2C on GH200, none on the CPU.
    assert h100.device_to_host_bandwidth == h200.host_to_device_bandwidth == 55e9
    gh200 = PROFILES["gh200"]
    assert (gh200.device_to_host_bandwidth, gh200.host_to_device_bandwidth) == (295e9, 342e9)
    assert gh200.peak_flops == h100.peak_flops and not cpu.has_host_link


def test_get_profile_errors_and_user_profiles() -> None:
    with pytest.raises(ValueError, match=r"'h100'.*'cpu'"):
        get_profile("tpu")
    with pytest.raises(ValueError, match="unknown device profile"):
        get_profile(3)  # type: ignore[arg-type]
    mine = DeviceProfile("mine", {torch.float32: 1e12}, memory_bandwidth=1e11, kernel_overhead=0.0)
    assert get_profile(mine) is mine
    cost = ConcreteCost("mm", OpKind.GEMM, 10**12, 10**12, 10**11, 0, torch.float32, False, True)
    assert estimate_runtime(cost, mine) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="memory_bandwidth"):
        DeviceProfile("bad", {torch.float32: 1e12}, memory_bandwidth=-1.0, kernel_overhead=0.0)
    with pytest.raises(ValueError, match=r"torch\.dtype"):
        DeviceProfile("bad", {"bf16": 1e12}, memory_bandwidth=1.0, kernel_overhead=0.0)  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="peak_flops"):
        DeviceProfile("bad", {torch.float32: math.nan}, memory_bandwidth=1.0, kernel_overhead=0.0)


def test_calibrate_cpu_quickly() -> None:
    start = time.perf_counter()
    profile = calibrate("cpu", size=128, repeats=2, copy_bytes=1 << 20)
    assert time.perf_counter() - start < 5
    assert set(profile.peak_flops) == {torch.float32, torch.bfloat16}
    numbers = [*profile.peak_flops.values(), profile.memory_bandwidth, profile.kernel_overhead]
    assert all(math.isfinite(x) and x > 0 for x in numbers)
    assert profile.kernel_overhead < 1e-2
    assert get_profile(profile) is profile
    one = calibrate(torch.device("cpu"), size=32, repeats=1, copy_bytes=1 << 16, dtypes=[torch.float32])
    assert set(one.peak_flops) == {torch.float32}
    with pytest.raises(ValueError, match="repeats"):
        calibrate("cpu", repeats=0)


def test_calibrate_defaults_stay_under_two_seconds() -> None:
    start = time.perf_counter()
    calibrate()
    assert time.perf_counter() - start < 2.0
