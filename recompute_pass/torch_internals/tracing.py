"""PyTorch's structured trace (``TORCH_TRACE``), which tlparse reads."""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = [
    "trace_artifact",
]


def trace_artifact(name: str, payload: Callable[[], str]) -> None:
    """A JSON artifact in PyTorch's structured trace (``TORCH_TRACE``; tlparse lists it
    under the graph being compiled). Costs nothing when no trace is being written."""
    torch._logging.trace_structured(
        "artifact", metadata_fn=lambda: {"name": name, "encoding": "json"}, payload_fn=payload
    )
