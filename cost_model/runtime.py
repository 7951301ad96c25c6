"""Roofline runtime of one node under a device profile.

``time = max(effective_flops / rate, bytes_moved / memory_bandwidth) + kernel_overhead``,
with ``rate`` the matrix-unit rate of the node's dtype for GEMM/CONV/ATTENTION and the
vector rate otherwise. So memory-bound ops (pointwise, norms, softmax, reductions, data
movement, unknown ops: few FLOPs per byte) come out bytes-bound and big GEMMs come out
FLOP-bound, without per-kind special cases.

- ``fused=True``: the op runs inside a neighbour's kernel (a pointwise op recomputed in a
  backward kernel): its inputs are already in registers and its output never reaches
  memory, so only its compute counts: no bytes, no launch.
- VIEW/NONE nodes, and nodes with neither FLOPs nor bytes (``empty``), take 0 s.
- COLLECTIVE: bytes read over the interconnect bandwidth, plus the launch.
"""

from __future__ import annotations

from .device import DeviceProfile, get_profile
from .hints import SizeHints
from .kinds import MATRIX_KINDS, OpKind
from .node_cost import ConcreteCost, NodeCost


def estimate_runtime(
    cost: NodeCost | ConcreteCost,
    device: DeviceProfile | str,
    hints: SizeHints | None = None,
    *,
    fused: bool = False,
) -> float:
    """Estimated seconds for ``cost`` on ``device`` (a profile or a name in ``PROFILES``).

    ``hints`` evaluates a symbolic cost; without hints the cost must be static, else
    ``ValueError`` names the free symbols.
    """
    profile = get_profile(device)
    concrete = _concrete(cost, hints)
    if concrete.kind in (OpKind.NONE, OpKind.VIEW):
        return 0.0
    if concrete.kind is OpKind.COLLECTIVE:
        if fused:
            return 0.0
        return concrete.bytes_in / profile.collective_bandwidth() + profile.kernel_overhead
    matrix = concrete.kind in MATRIX_KINDS
    rate = profile.matmul_flops(concrete.dtype) if matrix else profile.vector_rate()
    compute = concrete.effective_flops / rate
    if fused:
        return compute
    if concrete.effective_flops == 0 and concrete.total_bytes == 0:
        return 0.0
    memory = concrete.total_bytes / profile.memory_bandwidth
    return max(compute, memory) + profile.kernel_overhead


def _concrete(cost: NodeCost | ConcreteCost, hints: SizeHints | None) -> ConcreteCost:
    if isinstance(cost, ConcreteCost):
        return cost
    if hints is None:
        free = cost.free_symbols
        if free:
            names = ", ".join(sorted(str(s) for s in free))
            raise ValueError(f"{cost.op}: cost depends on shape symbols {names}; pass SizeHints")
        hints = SizeHints.static()
    return cost.evaluate(hints)
