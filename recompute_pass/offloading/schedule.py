"""The offload windows of a graph: which saved values may be offloaded, and when.

Computed once per joint graph, independent of the plan, so that keep/recompute/offload is
one problem (``offload_solve``):

- forward: the forward nodes in graph order (what extraction emits), each priced by the
  cost model; a value's copy out may start when its last forward use ends (views of it
  count as uses: they share its storage), and must end by the end of the forward;
- backward: the backward-only nodes in graph order, recomputation left out (it can only
  add compute before a use, so the windows are conservative); a value's copy back must
  end before the first backward node that reads it; a value recomputed from it would
  read it earlier, so the plan may not do both (``OffloadItem.readers``).

Which values: saved forward tensors computed by the graph (not inputs, not parameters),
contiguous, not views or results of multi-output ops (PyTorch's ``can_offload`` rules: the
transfer ops need a storage of their own), not the user's outputs, at least
``MIN_OFFLOAD_BYTES``, and only with a device profile that has a host link.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Mapping, Sequence

import torch
from torch import fx

from cost_model import DeviceProfile, OpKind, SizeHints, estimate_runtime, node_cost
from recompute_pass import torch_internals as ti
from recompute_pass.graph.costing import Costed, fuses
from recompute_pass.offloading.problem import MIN_OFFLOAD_BYTES, OffloadItem, OffloadProblem


def node_seconds(node: fx.Node, device: DeviceProfile, hints: SizeHints) -> float:
    """The cost model's time for one node as it runs in a step (pointwise ops fused)."""
    if node.op != "call_function":
        return 0.0
    return estimate_runtime(node_cost(node), device, hints, fused=fuses(node))


def offloadable(costed: Costed) -> dict[int, fx.Node]:
    """Candidate index -> node, for the saved values that may be offloaded."""
    joint = costed.joint
    (output,) = joint.module.graph.find_nodes(op="output")
    user_outputs = {n for n in output.args[0][: joint.num_fwd_outputs] if isinstance(n, fx.Node)}
    chosen: dict[int, fx.Node] = {}
    for i, candidate in enumerate(joint.candidates):
        node, val = candidate.node, candidate.node.meta.get("val")
        if (
            candidate.forward
            and candidate.can_save
            and not candidate.static
            and node.op == "call_function"
            and node.target is not operator.getitem
            and candidate.cost.kind is not OpKind.VIEW
            and not ti.returns_an_alias(node.target)
            and node not in user_outputs
            and isinstance(val, torch.Tensor)
            and val.is_contiguous()
            and costed.problem.items[i].size >= MIN_OFFLOAD_BYTES
        ):
            chosen[i] = node
    return chosen


def effective_users(node: fx.Node, within: Mapping[fx.Node, int]) -> list[fx.Node]:
    """Users of ``node`` among ``within``, through views (a view keeps its base alive)."""
    found: list[fx.Node] = []
    stack = list(node.users)
    while stack:
        user = stack.pop()
        if user in within and user not in found:
            found.append(user)
            if user.op == "call_function" and node_cost(user).kind is OpKind.VIEW:
                stack += list(user.users)
    return found


def for_order(offload: OffloadProblem, costed: Costed, order: Sequence[fx.Node]) -> OffloadProblem:
    """``offload`` with each value's deadline read off one plan's backward ``order``
    (recomputation included, where the plan puts it): exact for that plan, so a value
    that the plan recomputes from may be offloaded too (it is reloaded before that)."""
    starts: dict[fx.Node, float] = {}
    elapsed = 0.0
    for node in order:
        starts[node] = elapsed
        elapsed += node_seconds(node, costed.device, costed.hints)
    items = []
    for o in offload.items:
        node = costed.joint.candidates[o.item].node
        first = min((starts[u] for u in node.users if u in starts), default=elapsed)
        items.append(dataclasses.replace(o, deadline=first, readers=()))
    return dataclasses.replace(offload, items=tuple(items), backward_seconds=elapsed)


def windows(costed: Costed, host_bytes: int | None) -> OffloadProblem | None:
    """The offload problem of a graph; None when the device has no host link."""
    device = costed.device
    if not device.has_host_link:
        return None
    assert device.device_to_host_bandwidth is not None and device.host_to_device_bandwidth is not None
    joint, hints = costed.joint, costed.hints
    info = joint.node_info
    calls = [n for n in joint.module.graph.nodes if n.op == "call_function"]
    forward = [n for n in calls if info.is_required_fw(n)]  # type: ignore[attr-defined]
    backward = [n for n in calls if not info.is_required_fw(n)]  # type: ignore[attr-defined]
    seconds = {n: node_seconds(n, device, hints) for n in calls}
    ends: dict[fx.Node, float] = {}
    elapsed = 0.0
    for node in forward:
        elapsed += seconds[node]
        ends[node] = elapsed
    forward_seconds = elapsed
    starts: dict[fx.Node, float] = {}
    elapsed = 0.0
    for node in backward:
        starts[node] = elapsed
        elapsed += seconds[node]
    backward_seconds = elapsed
    index = {c.node: i for i, c in enumerate(joint.candidates)}
    items = []
    for i, node in sorted(offloadable(costed).items()):
        size = costed.problem.items[i].size
        uses = effective_users(node, ends)
        release = max((ends[u] for u in uses), default=ends.get(node, 0.0))
        release = max(release, ends.get(node, 0.0))
        deadline = min(
            min((starts[u] for u in node.users if u in starts), default=math.inf), backward_seconds
        )
        readers = tuple(sorted(index[u] for u in node.users if u in index and u in ends))
        items.append(
            OffloadItem(
                item=i,
                size=size,
                d2h_seconds=size / device.device_to_host_bandwidth,
                h2d_seconds=size / device.host_to_device_bandwidth,
                release=release,
                deadline=deadline,
                readers=readers,
            )
        )
    return OffloadProblem(tuple(items), forward_seconds, backward_seconds, host_bytes)
