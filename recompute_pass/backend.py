"""``torch.compile`` backends: Inductor with our partitioner, and the same without codegen."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from recompute_pass import config
from recompute_pass import torch_internals as ti
from recompute_pass.options import RecomputeOptions
from recompute_pass.partitioner import RecomputePartitioner


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

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable[..., Any]:
        partitioner = self.partitioner()
        if self.inductor:
            return inductor_backend(partitioner)(gm, example_inputs)
        return ti.eager_aot_backend(partitioner)(gm, example_inputs)

    def __repr__(self) -> str:
        kind = "inductor" if self.inductor else "eager"
        return f"RecomputeBackend({kind}, {self.overrides})"


def inductor_backend(partitioner: ti.CustomPartitionerFn) -> Callable[..., Any]:
    """Inductor with ``partitioner`` deciding what is saved (any wrapper around ours).

    The config each graph's predicted peak assumes (``ti.COMPILE_PATCHES``) needs nothing
    here: our partitioner makes Inductor honour it on every route
    (``ti.honour_compile_patches``).
    """

    def compile_graph(gm: fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable[..., Any]:
        with ti.inductor_config.patch(custom_partitioner_fn=partitioner):
            return ti.compile_fx(gm, list(example_inputs))

    return compile_graph


recompute_backend = RecomputeBackend(inductor=True)
"""Inductor generates the kernels; our partitioner decides what is saved."""

recompute_eager_backend = RecomputeBackend(inductor=False)
"""Our partitioner with the graphs run eagerly (like ``aot_eager``): fast tests, debugging."""
