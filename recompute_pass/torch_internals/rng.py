"""Random ops: replaying a draw in backward from its saved generator state, and
Inductor's seed prims."""

from __future__ import annotations

import contextlib

import torch
from torch import fx
from torch._functorch import config as functorch_config
from torch._functorch.partitioners import functionalize_rng_ops as _functionalize_rng_ops
from torch._guards import detect_fake_mode
from torch._inductor import config as inductor_config
from torch._ops import OpOverload
from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

__all__ = [
    "functionalize_rng_ops",
    "inductor_lookup_seed",
    "replayable_rng_state_bytes",
    "run_and_save_rng_state",
    "run_with_rng_state",
]


# Inductor's replacement of random ops numbers each draw's seed (``replace_random``).
inductor_lookup_seed = torch.ops.prims.inductor_lookup_seed.default


# Devices whose generator ``run_and_save_rng_state``/``run_with_rng_state`` save and restore.
_REPLAY_DEVICES = ("cpu", "cuda")


def functionalize_rng_ops(
    joint: fx.GraphModule, forward: fx.GraphModule, backward: fx.GraphModule, num_saved_sym: int
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Torch's rewrite of draws tagged for recomputation into state-saving/replaying ones.

    It builds the state's fake value under the ambient fake mode, which a partition run
    outside AOTAutograd (snapshots, benchmarks) lacks: use the joint graph's own then.
    """
    draws = [(n.name, n.meta.get("val")) for n in backward.graph.nodes if _is_seeded(n)]
    with contextlib.ExitStack() as stack:
        if detect_fake_mode() is None:
            vals = [n.meta.get("val") for n in joint.graph.find_nodes(op="placeholder")]
            fake_mode = detect_fake_mode(vals)
            if fake_mode is not None:
                stack.enter_context(fake_mode)
        forward, backward = _functionalize_rng_ops(joint, forward, backward, num_saved_sym)
    # Torch leaves the new nodes without ``meta["val"]``, which memory accounting reads:
    # a forward wrapper yields (state, the draw's value), a backward one the draw's value
    # (each replaces a draw in place, so in graph order they match the draws replaced).
    for node in forward.graph.nodes:
        if node.target is run_and_save_rng_state and "val" not in node.meta:
            results = {user.args[1]: user.meta.get("val") for user in node.users}
            node.meta["val"] = (results.get(0), results.get(1))
    remaining = {n.name for n in backward.graph.nodes if _is_seeded(n)}
    replaced = [val for name, val in draws if name not in remaining]
    replays = [n for n in backward.graph.nodes if n.target is run_with_rng_state and "val" not in n.meta]
    for node, val in zip(replays, replaced, strict=True):
        node.meta["val"] = val
    return forward, backward


def _is_seeded(node: fx.Node) -> bool:
    tags = getattr(node.target, "tags", ())
    return node.op == "call_function" and torch.Tag.nondeterministic_seeded in tags


def replayable_rng_state_bytes(node: fx.Node) -> int | None:
    """Bytes of generator state to save so that backward can replay ``node``'s draw, or None.

    Replay goes through ``run_and_save_rng_state`` (forward) and ``run_with_rng_state``
    (backward), which save and restore the device's default generator (``functionalize_rng_ops``).
    That excludes higher-order ops, ops given an explicit ``torch.Generator``, devices without
    such a generator, and Inductor's own seed prims (their seeds are the saved state already).
    On CUDA without ``fallback_random``, torch replays through the graph-safe generator, which
    saves nothing.
    """
    target = node.target
    if not isinstance(target, OpOverload) or target.namespace == "prims":
        return None
    values = fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    leaves = torch.utils._pytree.tree_leaves((values, node.meta.get("val")))
    if any(isinstance(leaf, torch.Generator) for leaf in leaves):
        return None
    devices = {leaf.device for leaf in leaves if isinstance(leaf, torch.Tensor)}
    devices |= {torch.device(d) for d in (node.kwargs.get("device"),) if d is not None}
    if len(devices) != 1:
        return None
    (device,) = devices
    if device.type not in _REPLAY_DEVICES:
        return None
    if device.type == "cpu":
        return torch.get_rng_state().numel()
    if functorch_config.graphsafe_rng_functionalization and not inductor_config.fallback_random:
        return 0
    return 16  # torch.cuda.get_rng_state(): a Philox seed and offset (two int64)
