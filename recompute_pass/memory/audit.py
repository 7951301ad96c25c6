"""A composed peak checked against the real compile's own memory plan, at no extra lowering.

A deep graph's peaks are composed from its pieces' lowerings (``composed``), which miss
what Inductor does across a piece boundary. Lowering the chosen plan's whole graph once
more to check it cost as much as all the composed checks together (a 12-layer Llama:
about 20 s of a 63 s partition, growing with depth), so the check is made on the lowering
Inductor does anyway to compile the graphs: once both are scheduled, their memory plan is
read off the compile (``inductor_memory.compiled_plan``) and replayed as the prediction
replays its own. Within ``TOLERANCE`` it is logged at INFO; beyond it, a warning names
both figures: the plan is compiled by then, so it cannot be chosen again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from torch import fx

from cost_model import SizeHints
from recompute_pass import torch_internals as ti
from recompute_pass.memory import inductor_memory
from recompute_pass.memory.inductor_memory import GraphPlan

log = logging.getLogger(__name__)

# How far the composed peak may be from the compiled graphs' (issue 26: 1%).
TOLERANCE = 0.01


@dataclass
class CompileAudit:
    """Watches Inductor compile one partition's forward and backward (``ti.ON_SCHEDULED``)."""

    forward: fx.GraphModule
    backward: fx.GraphModule
    num_user_outputs: int
    hints: SizeHints
    predicted: int  # the report's predicted peak, in bytes
    plans: dict[bool, GraphPlan] = field(default_factory=dict)  # by ``is_backward``
    compiled_peak: int | None = None  # once both graphs are compiled

    def attach(self) -> None:
        """From now on, Inductor's compiles of the two graphs report to this audit."""
        for graph in (self.forward, self.backward):
            graph.meta[ti.ON_SCHEDULED] = self
        ti.honour_compile_patches()

    # AOTAutograd copies the backward before compiling it: the copy reports here too. A
    # pickled graph (a cache entry) carries no audit.
    def __deepcopy__(self, memo: dict[int, object]) -> CompileAudit:
        return self

    def __reduce__(self) -> tuple[object, tuple[()]]:
        return _no_audit, ()

    def __call__(self, lowering: object, scheduler: object) -> None:
        self.plans[bool(lowering.is_backward)] = inductor_memory.compiled_plan(lowering, scheduler)  # type: ignore[attr-defined]
        if len(self.plans) == 2 and self.compiled_peak is None:
            self.compiled_peak = self._peak()
            self._judge()

    def _peak(self) -> int:
        def planner(graph: fx.GraphModule, *, is_backward: bool, **_: object) -> list[tuple[dict, GraphPlan]]:
            return [({}, self.plans[is_backward])]

        estimate = inductor_memory.predict_peak(
            self.forward,
            self.backward,
            num_user_outputs=self.num_user_outputs,
            hints=self.hints,
            planner=planner,
        )
        return estimate.peak_bytes

    def _judge(self) -> None:
        compiled = self.compiled_peak
        assert compiled is not None
        error = self.predicted / max(1, compiled) - 1
        if abs(error) <= TOLERANCE:
            log.info(
                "recompute_pass: predicted peak %d B, %+.2f%% from the compiled graphs' memory plan (%d B)",
                self.predicted,
                100 * error,
                compiled,
            )
            return
        log.warning(
            "recompute_pass: the predicted peak (%d B, composed from the graph's pieces) is %+.1f%% "
            "from the compiled graphs' memory plan (%d B): expect that peak",
            self.predicted,
            100 * error,
            compiled,
        )


def _no_audit() -> None:
    return None
