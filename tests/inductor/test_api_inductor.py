"""The public surface: config, per-compile options, registered names, cache identity:
the cases through Inductor (the rest are in ``tests/eager/test_api.py``)."""

from __future__ import annotations

import pytest
import torch

from recompute_pass import capture_reports


@pytest.mark.parametrize(
    ("backend", "compile_options"),
    [
        ("recompute", {"mode": "max-autotune-no-cudagraphs"}),
        ("recompute", {"options": {"epilogue_fusion": False}}),
        ("recompute_eager", {"mode": "max-autotune-no-cudagraphs"}),
    ],
)
def test_torch_compile_mode_and_options_reach_the_backend(backend, compile_options, caplog) -> None:
    """``torch.compile`` hands a named backend its ``mode`` and ``options``: Inductor's
    config, applied as ``backend="inductor"`` applies them (ignored, with a warning,
    without Inductor). They made the backend raise a ``TypeError``."""
    torch.compiler.reset()
    torch.manual_seed(0)
    weight = torch.randn(8, 8, requires_grad=True)
    x = torch.randn(4, 8)
    fn = torch.compile(lambda x: torch.tanh(x @ weight).sum(), backend=backend, **compile_options)
    with capture_reports() as reports, caplog.at_level("WARNING", logger="recompute_pass"):
        fn(x).backward()
    assert len(reports) == 1 and reports[0].fallback is None
    grad, weight.grad = weight.grad, None
    torch.tanh(x @ weight).sum().backward()
    torch.testing.assert_close(grad, weight.grad)
    ignored = [r for r in caplog.records if "ignored" in r.getMessage()]
    assert bool(ignored) is (backend == "recompute_eager")
