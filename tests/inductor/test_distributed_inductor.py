"""DDP, FSDP2 and tensor parallelism with the recompute backend, on 2 gloo ranks (CPU):
the cases through Inductor (the rest are in ``tests/eager/test_distributed.py``)."""

from __future__ import annotations

from tests.eager.test_distributed import (  # noqa: F401 (fixtures among them)
    _check_common,
    _fsdp_rank,
    pytestmark,
)
from tests.support.distributed import run_ranks


def test_fsdp2_through_inductor() -> None:
    ranks = run_ranks(_fsdp_rank, budgets=(0.5,), inductor=True, timeout=480)
    _check_common(ranks, 0.5)
