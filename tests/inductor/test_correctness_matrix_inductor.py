"""The correctness matrix: models x budgets x static/dynamic shapes x fp32/bf16 autocast:
the cases through Inductor (the rest are in ``tests/eager/test_correctness_matrix.py``)."""

from __future__ import annotations

import pytest

from tests.eager.test_correctness_matrix import (  # noqa: F401 (fixtures among them)
    INDUCTOR_FULL,
    INDUCTOR_SAMPLE,
    _inductor_case,
    pytestmark,
)
from tests.support.full_size import full_only


@pytest.mark.parametrize(("name", "budget", "shape", "precision"), INDUCTOR_SAMPLE)
def test_inductor_sample(name: str, budget: float, shape: str, precision: str) -> None:
    _inductor_case(name, budget, shape, precision)


@full_only("more Inductor compiles")
@pytest.mark.parametrize(("name", "budget", "shape", "precision"), INDUCTOR_FULL)
def test_inductor_full(name: str, budget: float, shape: str, precision: str) -> None:
    _inductor_case(name, budget, shape, precision)
