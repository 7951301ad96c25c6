"""``RecomputeOptions.plan_sizes``: plan at other sizes than the traced ones.

Under ``dynamic=True`` the graph is symbolic in its sizes, but a plan is chosen at numbers:
the size hints, which are the sizes the first call happened to have. ``plan_sizes`` names
dimensions by their Dynamo source (``"L['idx'].size()[1]"``) and gives the size to plan
for; here the names become the symbols they size, so the cost model, the peak walk and
Inductor's memory plan all evaluate the graph there (``torch_internals.shape_env_hints``).
The compiled code stays symbolic: it runs at every size, planned for one.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

import sympy
from torch import fx

from cost_model import SizeHints
from recompute_pass import torch_internals as ti

log = logging.getLogger(__name__)


def symbol_values(graph: fx.Graph | fx.GraphModule, plan_sizes: Mapping[str, int]) -> dict[sympy.Symbol, int]:
    """The value each symbol of ``graph`` takes under ``plan_sizes`` (only those named).

    A symbol named twice with two sizes (Dynamo gives equal sizes one symbol: two inputs of
    the same length share it) is an error: no single plan serves both sizes.
    """
    if not plan_sizes:
        return {}
    env = shape_env_of(graph)
    if env is None:
        _warn_unused(
            tuple(sorted(plan_sizes)), "the graph has no shape symbols (was it traced dynamic=True?)"
        )
        return {}
    values: dict[sympy.Symbol, int] = {}
    used: set[str] = set()
    for sym, names in ti.symbol_sources(env).items():
        sizes = {plan_sizes[name] for name in names if name in plan_sizes}
        used.update(name for name in names if name in plan_sizes)
        if len(sizes) > 1:
            raise ValueError(
                f"recompute_pass: plan_sizes gives symbol {sym} (sources {', '.join(names)}) "
                f"several sizes {sorted(sizes)}"
            )
        if sizes:
            values[sym] = sizes.pop()
    unused = tuple(sorted(set(plan_sizes) - used))
    if unused:
        _warn_unused(unused, "no symbol of the graph has these sources (a static or specialised size?)")
    return values


def planned_hints(graph: fx.Graph | fx.GraphModule, plan_sizes: Mapping[str, int]) -> SizeHints:
    """The graph's size hints, with ``plan_sizes`` in place of the traced values."""
    hints = SizeHints.from_graph(graph)
    return hints.override(symbol_values(graph, plan_sizes)) if plan_sizes else hints


def shape_env_of(graph: fx.Graph | fx.GraphModule) -> ti.ShapeEnv | None:
    if isinstance(graph, fx.GraphModule):
        graph = graph.graph
    for node in graph.nodes:
        val = node.meta.get("val")
        fake_mode = ti.detect_fake_mode([val]) if val is not None else None
        if fake_mode is not None and fake_mode.shape_env is not None:
            return fake_mode.shape_env
    return None


@functools.cache
def _warn_unused(names: tuple[str, ...], why: str) -> None:
    log.warning("recompute_pass: plan_sizes %s not used: %s", ", ".join(names), why)
