"""Inductor's compile of a partitioned graph: the config it is compiled under and the
observer shown its schedule (both set on the graph by the partitioner), and
``torch.compile``'s ``mode=``/``options=`` as Inductor config."""

from __future__ import annotations

import contextlib
import logging
import unittest.mock
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import fx
from torch._dynamo import config as dynamo_config  # benchmarks: recompile limit for many plans
from torch._dynamo.exc import Unsupported as GraphBreak  # what ``fullgraph=True`` raises at a break
from torch._inductor import compile_fx as inductor_compile_fx
from torch._inductor import config as inductor_config
from torch._inductor.compile_fx import (
    compile_fx,
)
from torch._inductor.custom_graph_pass import CustomPartitionerFn
from torch._inductor.graph import GraphLowering
from torch._inductor.scheduler import Scheduler

log = logging.getLogger(__name__)

__all__ = [
    "COMPILE_PATCHES",
    "GraphBreak",
    "InductorEntry",
    "CustomPartitionerFn",
    "ON_SCHEDULED",
    "compile_fx",
    "compile_graph_inner",
    "dynamo_config",
    "honour_compile_patches",
    "inductor_compile_fx",
    "inductor_mode_patches",
]


def inductor_mode_patches(mode: str | None, options: dict[str, Any] | None) -> dict[str, Any]:
    """Inductor's config for ``torch.compile(mode=..., options=...)``, validated as torch
    validates it for ``backend="inductor"`` (a ``RuntimeError`` naming an unknown option)."""
    return dict(torch._TorchCompileInductorWrapper(mode, options, dynamic=None).config)


# ``gm.meta`` key: Inductor config a partitioned graph is to be compiled under, set by the
# partitioner when its memory model found the graph peaks lower so (``inductor_memory``).
COMPILE_PATCHES = "recompute_pass.inductor_patches"


# Inductor's compile of one graph, behind ``compile_fx_inner`` (forward and backward alike,
# whatever route called ``compile_fx``, the backward possibly at its first call). Looked up
# by name in this module at each call, as torch's own ``torch._dynamo.testing`` patches it:
# a spy replaces ``compiling.compile_graph_inner``.
compile_graph_inner = inductor_compile_fx._compile_fx_inner


# ``gm.meta`` key: a function the real compile calls with its ``GraphLowering`` and
# ``Scheduler`` once it has scheduled the graph, before code generation (the partitioner
# reads the compile's own memory plan there, ``memory.audit``).
ON_SCHEDULED = "recompute_pass.on_scheduled"


def _compile_graph_under_its_patches(
    gm: fx.GraphModule, example_inputs: Sequence[object], *args: Any, **kwargs: Any
) -> Any:
    observed = _scheduled_observed(gm.meta.get(ON_SCHEDULED))
    with inductor_config.patch(dict(gm.meta.get(COMPILE_PATCHES, {}))), observed:
        return compile_graph_inner(gm, example_inputs, *args, **kwargs)


@contextlib.contextmanager
def _scheduled_observed(observer: Callable[[GraphLowering, Scheduler], None] | None) -> Iterator[None]:
    """While the block runs, ``observer`` sees each graph Inductor schedules for code
    generation (``GraphLowering._update_scheduler`` in torch 2.13). An observer's error is
    logged, never raised: it must not fail the compile."""
    if observer is None:
        yield
        return
    update = GraphLowering._update_scheduler

    def observed(lowering: GraphLowering) -> None:
        update(lowering)
        try:
            observer(lowering, lowering.scheduler)
        except Exception:
            log.warning("recompute_pass: reading the compiled graph's memory plan failed", exc_info=True)

    with unittest.mock.patch.object(GraphLowering, "_update_scheduler", observed):
        yield


def honour_compile_patches() -> None:
    """From now on, every graph Inductor compiles does so under the config its
    ``COMPILE_PATCHES`` asks for, and is shown to its ``ON_SCHEDULED`` observer (no-ops
    for graphs without them), on every route that reaches Inductor's ``compile_fx_inner``:
    our backends, ``custom_partitioner_fn`` set by hand, trainers calling
    ``torch.compile(model)``. Idempotent."""
    if inductor_compile_fx._compile_fx_inner is not _compile_graph_under_its_patches:
        inductor_compile_fx._compile_fx_inner = _compile_graph_under_its_patches


Route = Callable[[fx.GraphModule, Sequence[object], "dict[str, Any] | None"], Any]


# Keywords of a top-level compile (``torch.compile``'s Inductor wrapper passes both); a
# call with others is Inductor's own and reaches it untouched.
_ROUTED_KEYWORDS = {"config_patches", "compile_region_name"}


class InductorEntry:
    """Inductor's entry point as Dynamo's ``"inductor"`` backend reaches it
    (``torch._inductor.compile_fx.compile_fx``, looked up by name at each compile, by
    ``torch.compile(model)`` and by trainers alike), redirected to ``route`` while
    installed. ``route(gm, example_inputs, config_patches)`` returns the compiled callable,
    or None to let Inductor compile as it would. Compiles that ``route`` itself runs
    (``inside``), and Inductor's own recursive calls, reach Inductor untouched."""

    def __init__(
        self, route: Callable[[fx.GraphModule, Sequence[object], dict[str, Any] | None], Any]
    ) -> None:
        self.route = route
        self.depth = 0

    def install(self) -> None:
        inductor_compile_fx.compile_fx = self._entry

    def remove(self) -> None:
        if inductor_compile_fx.compile_fx == self._entry:
            inductor_compile_fx.compile_fx = compile_fx

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def _entry(self, model: fx.GraphModule, inputs: Sequence[object], *args: Any, **kwargs: Any) -> Any:
        if self.depth == 0 and not args and set(kwargs) <= _ROUTED_KEYWORDS:
            with self.inside():
                routed = self.route(model, inputs, kwargs.get("config_patches"))
            if routed is not None:
                return routed
        with self.inside():
            return compile_fx(model, inputs, *args, **kwargs)
