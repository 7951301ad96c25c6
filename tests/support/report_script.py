"""A small training step compiled through Inductor, run in a fresh process by
``tests/inductor/test_reports_outside.py``: what it reports, as one ``RESULT <json>`` line.

    python -m tests.support.report_script ROUTE   # ROUTE: backend | install

The model has a graph break, so the step is two compiled graphs (two reports).
"""

from __future__ import annotations

import io
import json
import logging
import sys

import torch
from torch._dynamo.utils import counters

import recompute_pass
from recompute_pass import capture_reports, recompute_backend


class Broken(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32))
        self.second = torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x)
        torch._dynamo.graph_break()
        return self.second(h).square().mean()


# The graph after the break runs a provisional plan in the first step (which compiles),
# is planned in the second (recorded) and compiled at its end; the third runs the plans.
STEPS = 3


def main(route: str) -> None:
    stream = io.StringIO()
    logger = logging.getLogger("recompute_pass")
    logger.addHandler(logging.StreamHandler(stream))
    logger.setLevel(logging.INFO)  # the summary line of each report
    torch.manual_seed(0)
    model, x = Broken(), torch.randn(8, 16)
    options = {"memory_budget": 0.5, "fallback": False}
    if route == "backend":
        compiled = torch.compile(model, backend=recompute_backend.with_options(**options))
    else:
        assert route == "install", route
        recompute_pass.install(**options)
        compiled = torch.compile(model)
    with capture_reports() as reports:
        for _ in range(STEPS):
            model.zero_grad(set_to_none=True)
            loss = compiled(x)
            loss.backward()
    lines = [line for line in stream.getvalue().splitlines() if "cache hit" not in line]
    result = {
        "reports": [report.to_json() for report in reports],
        "texts": [report.to_text() for report in reports],
        "steps": [step.to_json() for step in reports.steps],
        "log": lines,
        "hits": counters["aot_autograd"]["autograd_cache_hit"],
        "misses": counters["aot_autograd"]["autograd_cache_miss"],
        "loss": loss.item(),
        "grads": [p.grad.sum().item() for p in model.parameters()],
    }
    print("RESULT " + json.dumps(result))  # noqa: T201 (the parent process reads it)


if __name__ == "__main__":
    main(sys.argv[1])
