"""Robustness: nothing our partitioner does may raise inside a user's training step:
the cases through Inductor (the rest are in ``tests/eager/test_robustness.py``)."""

from __future__ import annotations

import logging

import pytest

import recompute_pass.partitioner as partitioner_module
from recompute_pass import recompute_backend
from tests.eager.test_robustness import (  # noqa: F401 (fixtures among them)
    CASES,
    _fail,
    _warnings,
    pytestmark,
)
from tests.support.harness import assert_same_step, autograd_cache_off, build, case_inputs, run_step


def test_inductor_falls_back_too(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.setattr(partitioner_module, "decide", _fail)
    case = CASES["mlp"]
    expected = run_step(build(case), case_inputs(case))
    with autograd_cache_off(), caplog.at_level(logging.WARNING):
        step = run_step(build(case), case_inputs(case), backend=recompute_backend)
    assert_same_step(step, expected, rtol=1e-4, atol=1e-5)
    assert step.reports[0].fallback == "RuntimeError: injected failure"
    assert len(_warnings(caplog)) == 1
