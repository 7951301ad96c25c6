"""A CPU stand-in for the host tier, for tests only: the transfer is a copy.

PyTorch's ``ao.offload`` / ``ao.reload`` / ``ao.wait_tensor`` need an accelerator (a
transfer stream, events, pinned host memory). On a CPU-only machine this module registers
CPU kernels for the three ops, which take precedence over PyTorch's device-generic ones
while the context is open:

- ``ao.offload(x)`` returns a copy of ``x`` (the "host" copy);
- ``ao.reload(x, device, size, stride)`` returns a copy of ``x`` with that layout;
- ``ao.wait_tensor(x, keepalive, last_use_of_storage)`` returns ``x``; it frees
  ``keepalive``'s storage, as PyTorch's does once a transfer is complete (our graphs pass
  the source as ``last_use_of_storage`` instead, which only keeps it alive until then:
  ``recompute_pass.extract.offload``).

Nothing moves between memories and nothing overlaps: this checks the plan and the
rewritten graphs (which values, which ops where, gradients), not transfer speed. It is not
part of the library and must not be used outside tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import torch

from cost_model import PROFILES, DeviceProfile
from recompute_pass import torch_internals as ti  # noqa: F401  (registers the ao ops)

# The CPU profile with a host link, so that the solver may offload: 25 GB/s each way,
# half the profile's DRAM bandwidth (a copy reads and writes).
STANDIN_PROFILE: DeviceProfile = dataclasses.replace(
    PROFILES["cpu"], name="cpu-standin", device_to_host_bandwidth=25e9, host_to_device_bandwidth=25e9
)


def _offload(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.clone(memory_format=torch.contiguous_format)


def _reload(
    tensor: torch.Tensor,
    device: torch.device,
    original_size: list[int] | None = None,
    original_stride: list[int] | None = None,
) -> torch.Tensor:
    size = original_size if original_size is not None else list(tensor.shape)
    stride = original_stride if original_stride is not None else list(tensor.stride())
    result = torch.empty_strided(size, stride, dtype=tensor.dtype, device=device)
    result.copy_(tensor)
    return result


def _wait(
    tensor: torch.Tensor,
    keepalive: torch.Tensor | None = None,
    last_use_of_storage: torch.Tensor | None = None,
) -> torch.Tensor:
    if keepalive is not None and keepalive.untyped_storage().size() > 0:
        keepalive.untyped_storage().resize_(0)
    return tensor


@contextlib.contextmanager
def cpu_host_tier() -> Iterator[None]:
    """While open, the ``ao`` ops run on CPU tensors as copies (see the module docstring)."""
    library = torch.library.Library("ao", "IMPL")
    try:
        library.impl("offload", _offload, "CPU")
        library.impl("reload", _reload, "CPU")
        library.impl("wait_tensor", _wait, "CPU")
        yield
    finally:
        library._destroy()
