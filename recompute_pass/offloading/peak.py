"""The fast peak estimate of a plan with offloaded values (``plan_peak``, adjusted).

The joint-graph walk gives the live bytes as each node runs with every saved value on
the device. An offloaded value is off the device from the end of its copy out (its wait,
placed by ``offload_link`` in the walk's forward order) to the issue of its copy back (the
prefetched reload, placed in the walk's backward order): its bytes are subtracted from the
timeline between the two. The exact prediction walks the extracted graphs, where the
``ao`` ops stand (``liveness``, ``OFF_DEVICE_OPS``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from torch import fx

from cost_model import DeviceProfile, SizeHints
from recompute_pass.memory.liveness import PeakEstimate
from recompute_pass.offloading.link import backward_slots, forward_slots
from recompute_pass.offloading.schedule import effective_users, node_seconds


def with_offload(
    estimate: PeakEstimate,
    offloaded: Mapping[fx.Node, int],
    nodes: Mapping[str, fx.Node],
    device: DeviceProfile,
    hints: SizeHints,
) -> PeakEstimate:
    """``offloaded``: node -> bytes; ``nodes``: the walk's node names -> nodes."""
    if not offloaded:
        return estimate
    assert device.device_to_host_bandwidth is not None and device.host_to_device_bandwidth is not None
    timeline = list(estimate.timeline)
    forward = [k for k, entry in enumerate(timeline) if entry[0] == "forward"]
    backward = [k for k, entry in enumerate(timeline) if entry[0] == "backward"]
    seconds = [
        node_seconds(nodes[timeline[k][1]], device, hints) if timeline[k][1] in nodes else 0.0
        for k in range(len(timeline))
    ]
    forward_position = {nodes[timeline[k][1]]: p for p, k in enumerate(forward) if timeline[k][1] in nodes}
    backward_position = {nodes[timeline[k][1]]: p for p, k in enumerate(backward) if timeline[k][1] in nodes}
    out, back = [], []
    for node, size in offloaded.items():
        uses = [forward_position[u] for u in effective_users(node, forward_position)]
        release = max([forward_position.get(node, 0), *uses])
        out.append((node, release, size / device.device_to_host_bandwidth))
        reads = [backward_position[u] for u in node.users if u in backward_position]
        if reads:
            back.append((node, min(reads), size / device.host_to_device_bandwidth))
    gone = forward_slots([seconds[k] for k in forward], out)
    back_at = backward_slots([seconds[k] for k in backward], back)
    live = [entry[2] for entry in timeline]
    for node, size in offloaded.items():
        if node not in gone:
            continue
        for p in range(gone[node].position + 1, len(forward)):
            live[forward[p]] -= size
        issue = back_at[node].position if node in back_at else len(backward)
        for p in range(issue):
            live[backward[p]] -= size
    adjusted = [(phase, name, value) for (phase, name, _), value in zip(timeline, live, strict=True)]
    return dataclasses.replace(PeakEstimate.of(adjusted, estimate.model), note=estimate.note)
