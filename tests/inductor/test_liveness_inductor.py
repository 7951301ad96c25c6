"""The predicted peak against the measured one (CPU profiler allocation events):
the cases through Inductor (the rest are in ``tests/eager/test_liveness.py``)."""

from __future__ import annotations

from recompute_pass import recompute_backend
from recompute_pass import torch_internals as ti
from tests.eager.test_liveness import (
    _measured_and_predicted,
)


def test_prediction_through_inductor() -> None:
    with ti.inductor_config.patch(force_disable_caches=True):
        measured, predicted = _measured_and_predicted("mlp", recompute_backend.with_options(fallback=False))
    assert abs(predicted - measured) <= max(8, measured // 1000), (predicted, measured)
