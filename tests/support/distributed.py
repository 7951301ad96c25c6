"""For the distributed tests: spawned gloo ranks, a small model, a single-process
reference, and what the partitioned graphs hold.

``run_ranks`` runs a module-level function on each rank of a fresh gloo group on
127.0.0.1 (``benchmarks.harness.ranks``: bounded in time, every process ends) and returns what
each rank returned: plain, picklable data; the tests assert in the parent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import fx, nn

from benchmarks.harness import ranks
from recompute_pass import RecomputePartitioner
from recompute_pass import torch_internals as ti
from tests.support.harness import autograd_cache_off

WORLD = 2


def _with_test_settings(rank: int, world: int, target: Callable[..., Any], **kwargs: Any) -> Any:
    with autograd_cache_off(compile_threads=1):
        return target(rank, world, **kwargs)


def run_ranks(fn: Callable[..., Any], *, timeout: float = 300.0, **kwargs: Any) -> list[Any]:
    """``fn(rank, world, **kwargs)`` on ``WORLD`` gloo ranks, caches off (every compile
    partitions, so every rank reports); see ``benchmarks.harness.ranks.run_ranks``."""
    return ranks.run_ranks(_with_test_settings, world=WORLD, timeout=timeout, target=fn, **kwargs)


# ---- the model ----

DIM = 32
LOCAL_BATCH = 8


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class Stack(nn.Module):
    def __init__(self, dim: int = DIM, layers: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(layers))
        self.head = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x).square().mean()


def build(dim: int = DIM) -> nn.Module:
    torch.manual_seed(0)
    return Stack(dim)


def global_batch(world: int, dim: int = DIM, local: int = LOCAL_BATCH) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(world * local, dim)


def reference_grads(model: nn.Module, batch: torch.Tensor) -> dict[str, torch.Tensor]:
    """One eager single-process step on the whole batch (the loss is a mean, so the average
    of the ranks' local gradients equals it)."""
    model.zero_grad(set_to_none=True)
    model(batch).backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def full_grads(model: nn.Module) -> dict[str, torch.Tensor]:
    """Gradients as one tensor each: DTensor shards (FSDP2, TP) gathered (a collective)."""
    out = {}
    for name, p in model.named_parameters():
        grad = p.grad
        if hasattr(grad, "full_tensor"):
            grad = grad.full_tensor()
        out[name] = grad.detach().clone()
    return out


def relative_error(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> float:
    assert actual.keys() == expected.keys(), (sorted(actual), sorted(expected))
    scale = max(g.abs().max().item() for g in expected.values())
    return max((actual[k] - g).abs().max().item() for k, g in expected.items()) / scale


# ---- what the partitioner decided, as plain data ----


class Recorder(ti.CustomPartitionerFn):
    """Wraps our partitioner and records, per graph, facts read off the graphs it returns."""

    def __init__(self, inner: RecomputePartitioner) -> None:
        self.inner = inner
        self.graphs: list[dict[str, Any]] = []

    def uuid(self) -> str:
        return self.inner.uuid()

    def __call__(self, gm: fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
        primals = [n for n in gm.graph.nodes if ti.is_primal(n)]
        indices = ti.flat_static_input_indices(primals, kwargs.get("static_lifetime_input_indices") or [])
        static = {primals[i].name for i in indices}
        forward, backward = self.inner(gm, joint_inputs, **kwargs)
        self.graphs.append(graph_facts(forward, backward, kwargs["num_fwd_outputs"], static))
        return forward, backward


def _is_collective(node: fx.Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "namespace", "") in (
        "_c10d_functional",
        "c10d_functional",
    )


def graph_facts(
    forward: fx.GraphModule, backward: fx.GraphModule, num_fwd_outputs: int, static: set[str]
) -> dict[str, Any]:
    """What crosses to backward and what backward recomputes.

    ``params_only``: saved values computed from static inputs (parameters) alone, i.e. a
    copy of a parameter; for FSDP2 that would keep an all-gathered parameter alive.
    """
    (output,) = forward.graph.find_nodes(op="output")
    saved = [n for n in output.args[0][num_fwd_outputs:] if isinstance(n, fx.Node)]
    params_only = []
    for node in saved:
        if node.op == "placeholder":
            continue
        roots, stack, seen = set(), [node], set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.op == "placeholder":
                roots.add(n.name)
            stack += n.all_input_nodes
        if roots and roots <= static:
            params_only.append(node.name)
    forward_names = {n.name for n in forward.graph.nodes if n.op == "call_function"}
    return {
        "saved_static": sorted(n.name for n in saved if n.name in static),
        "saved_inputs": sorted(
            (n.name, tuple(n.meta["val"].shape), str(n.meta["val"].dtype))
            for n in saved
            if n.op == "placeholder" and n.name not in static and isinstance(n.meta.get("val"), torch.Tensor)
        ),
        "params_only": params_only,
        "forward_collectives": sum(_is_collective(n) for n in forward.graph.nodes),
        "recomputed_collectives": [
            n.name for n in backward.graph.nodes if _is_collective(n) and n.name in forward_names
        ],
    }


def report_facts(report: Any) -> dict[str, Any]:
    return {
        "digest": report.plan_digest,
        "fallback": report.fallback,
        "saved_bytes": report.saved_bytes,
        "budget_bytes": report.budget_bytes,
        "rank": report.rank,
        "world_size": report.world_size,
        "notes": list(report.notes),
        "recomputed_kinds": sorted({r.kind.value for r in report.recomputed}),
        "saved_activation_inputs": sorted(
            s.name for s in report.saved if s.op == "input" and not s.static and s.bytes > 0
        ),
        "saved_static": sorted(s.name for s in report.saved if s.static),
    }
