"""The predicted peak against the measured one (CPU profiler allocation events):
the cases through Inductor (the rest are in ``tests/eager/test_liveness.py``)."""

from __future__ import annotations

from recompute_pass import recompute_backend
from tests.eager.test_liveness import (
    _measured_and_predicted,
)
from tests.support.harness import autograd_cache_off


def test_prediction_through_inductor() -> None:
    with autograd_cache_off():
        measured, predicted = _measured_and_predicted("mlp", recompute_backend.with_options(fallback=False))
    assert abs(predicted - measured) <= max(8, measured // 1000), (predicted, measured)
