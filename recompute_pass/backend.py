"""``torch.compile`` backends: Inductor with our partitioner, and the same without codegen."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from recompute_pass import config
from recompute_pass import torch_internals as ti
from recompute_pass.options import RecomputeOptions
from recompute_pass.partitioner import RecomputePartitioner
from recompute_pass.step import plans_steps, step_graph, trains

log = logging.getLogger(__name__)


class RecomputeBackend:
    """A Dynamo backend; ``with_options`` returns a configured copy.

    Options given here override ``recompute_pass.config`` and are validated immediately;
    the rest is read from the config when a graph is compiled.
    """

    def __init__(self, *, inductor: bool = True, overrides: dict[str, Any] | None = None) -> None:
        self.inductor = inductor
        self.overrides = dict(overrides or {})
        config.options().replace(**self.overrides)  # validate now, not at compile time

    def with_options(self, **overrides: Any) -> RecomputeBackend:
        return RecomputeBackend(inductor=self.inductor, overrides={**self.overrides, **overrides})

    def options(self) -> RecomputeOptions:
        return config.options().replace(**self.overrides)

    def partitioner(self) -> RecomputePartitioner:
        return RecomputePartitioner(self.options())

    def __call__(
        self,
        gm: fx.GraphModule,
        example_inputs: Sequence[torch.Tensor],
        *,
        mode: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> Callable[..., Any]:
        """``mode`` and ``options``: what ``torch.compile(mode=..., options=...)`` hands a
        backend; Inductor's config, applied as ``backend="inductor"`` applies them.

        Under a peak budget (``step.plans_steps``) a graph that will be trained belongs to
        its training step, recorded and reported as one, whose plans are chosen together
        where the budget asks (``recompute_pass.step``)."""
        settings = self.options()
        patches = ti.inductor_mode_patches(mode, options) if self.inductor else None
        if not self.inductor and (mode not in (None, "default") or options):
            ignored = "recompute_pass: the eager backend runs no Inductor: mode=%r, options=%r ignored"
            log.warning(ignored, mode, options)
        if plans_steps(settings) and trains(example_inputs):
            return step_graph(
                gm, example_inputs, options=settings, inductor=self.inductor, config_patches=patches
            )
        partitioner = RecomputePartitioner(settings)
        if self.inductor:
            return inductor_backend(partitioner, patches)(gm, example_inputs)
        return ti.eager_aot_backend(partitioner)(gm, example_inputs)

    def __repr__(self) -> str:
        kind = "inductor" if self.inductor else "eager"
        return f"RecomputeBackend({kind}, {self.overrides})"


def inductor_backend(
    partitioner: ti.CustomPartitionerFn, config_patches: dict[str, Any] | None = None
) -> Callable[..., Any]:
    """Inductor with ``partitioner`` deciding what is saved (any wrapper around ours), and
    ``config_patches`` (``torch.compile``'s ``mode`` and ``options``).

    The config each graph's predicted peak assumes (``ti.COMPILE_PATCHES``) needs nothing
    here: our partitioner makes Inductor honour it on every route
    (``ti.honour_compile_patches``).
    """

    def compile_graph(gm: fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable[..., Any]:
        with ti.inductor_config.patch(custom_partitioner_fn=partitioner):
            return ti.compile_fx(gm, list(example_inputs), config_patches=config_patches)

    return compile_graph


recompute_backend = RecomputeBackend(inductor=True)
"""Inductor generates the kernels; our partitioner decides what is saved."""

recompute_eager_backend = RecomputeBackend(inductor=False)
"""Our partitioner with the graphs run eagerly (like ``aot_eager``): fast tests, debugging."""
