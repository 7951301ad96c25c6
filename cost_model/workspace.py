"""Bytes a kernel allocates and frees inside itself, beyond its inputs and outputs.

A memory timeline that counts only values misses these. Measured on the CPU profiler's
allocation events (torch 2.13), and read off ATen's CPU kernels:

- ``native_dropout``: ``input * mask`` first converts the boolean mask to the input's
  dtype, a temporary the size of the input (2 MiB per draw on the benchmark's GPT, a
  tenth of its peak);
- flash attention (``_scaled_dot_product_flash_attention_for_cpu`` and its backward):
  per-thread blocks of ``qSplit x kvSplit`` float accumulators (``FlashAttentionKernel``),
  tens of KiB on 2 threads, more with more threads;
- a draw replayed through ``run_with_rng_state``: the CPU generator's current state,
  copied (``get_rng_state``, 5,056 B) to be restored after the replay, held while the
  replayed op runs with its own temporaries.

On CUDA these kernels keep such state in registers and shared memory: nothing.

Not modelled (``unmodelled_workspace``): a CPU matmul in bfloat16 or float16 packs its
operands through oneDNN into a workspace whose size follows the blocking oneDNN picks (the
reduction length, the layout, the threads), not the shapes alone: 337,664 B for a
transposed [512, 256] by [256, 64] in bfloat16 on 2 threads, 75,392 B untransposed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .hints import SizeHints
from .symbolic import shape_of

aten = torch.ops.aten
_FLOAT = 4  # the kernels accumulate in float for float, half and bfloat16 inputs

Shape = tuple[Sequence[int], int]  # (sizes, itemsize) of one tensor input


def workspace_bytes(op: object, device_type: str, inputs: Sequence[Shape], *, replayed: object = None) -> int:
    """Temporary bytes of ``op`` on ``device_type`` given its tensor inputs, in argument
    order. ``replayed``: for ``run_with_rng_state`` (inputs: the state, then the replayed
    op's), the op it replays."""
    if device_type != "cpu" or not inputs:
        return 0
    if replayed is not None:
        (state, itemsize), rest = inputs[0], inputs[1:]
        return _numel(state) * itemsize + workspace_bytes(replayed, device_type, rest)
    if op is aten.native_dropout.default:
        return max(_numel(sizes) * itemsize for sizes, itemsize in inputs)
    if op is aten._scaled_dot_product_flash_attention_for_cpu.default and len(inputs) >= 2:
        (query, _), (key, _) = inputs[0], inputs[1]
        q_split, kv_split = _flash_splits(query[-2], key[-2])
        head = query[-1]
        per_thread = q_split * kv_split + 2 * q_split + q_split * head
        return torch.get_num_threads() * per_thread * _FLOAT
    if op is aten._scaled_dot_product_flash_attention_for_cpu_backward.default and len(inputs) >= 3:
        (query, _), (key, _) = inputs[1], inputs[2]  # (grad_out, query, key, value, ...)
        q_split, kv_split = _flash_splits(query[-2], key[-2])
        return torch.get_num_threads() * 2 * q_split * kv_split * _FLOAT
    return 0


def tensor_workspace_bytes(
    op: object,
    device_type: str,
    tensors: Sequence[torch.Tensor],
    hints: SizeHints,
    *,
    replayed: object = None,
) -> int:
    """``workspace_bytes`` for (fake) tensor inputs, sizes at ``hints`` (no guards)."""
    inputs = [([hints.evaluate(s) for s in shape_of(t)], t.dtype.itemsize) for t in tensors]
    return workspace_bytes(op, device_type, inputs, replayed=replayed)


def _flash_splits(q_len: int, kv_len: int) -> tuple[int, int]:
    """ATen's CPU flash attention block sizes."""
    q_split = 256 if q_len >= 768 else 64 if q_len >= 192 else 32
    kv_split = 512 if kv_len >= 512 else kv_len
    return min(q_split, q_len), kv_split


def _numel(sizes: Sequence[int]) -> int:
    total = 1
    for size in sizes:
        total *= size
    return total


_PACKED_ON_CPU = frozenset({aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default})


def unmodelled_workspace(op: object, device_type: str, dtype: torch.dtype) -> bool:
    """Whether ``op`` allocates a workspace ``workspace_bytes`` cannot size (a CPU matmul in
    reduced precision): a peak predicted across it is low by up to that workspace."""
    return device_type == "cpu" and dtype in (torch.bfloat16, torch.float16) and op in _PACKED_ON_CPU
