"""The default process group's collective count and key-value store."""

from __future__ import annotations

import torch

__all__ = [
    "collectives_issued",
    "default_store",
]


def collectives_issued() -> int:
    """How many collectives the default group's CPU backend has issued in this process."""
    from torch.distributed.distributed_c10d import _get_default_group

    backend = _get_default_group()._get_backend(torch.device("cpu"))
    return backend._get_sequence_number_for_group()


def default_store() -> torch.distributed.Store:
    """The default process group's key-value store (its rendezvous)."""
    from torch.distributed.distributed_c10d import _get_default_store

    return _get_default_store()
