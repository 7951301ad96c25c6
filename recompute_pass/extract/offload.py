"""Rewrite a plan's forward and backward graphs to offload the values the plan offloads.

PyTorch's pass emits the ops (``ti.insert_offload_ops``): in the forward, ``ao.offload``
after the value's last use and ``ao.wait_tensor`` (which frees the device copy once the
transfer is done); in the backward, ``ao.reload`` and its ``ao.wait_tensor`` before the
first use. We write no transfer code; we only move the two ops PyTorch lets move, to the
places the link schedule (``offload_link``) gives on these very graphs:

- the forward wait, after the node during which the copy completes (PyTorch's own
  helper sinks every wait to the end of the forward, which keeps each value on the device
  through the whole forward: no use for one compiled graph of a whole model);
- the backward reload, early enough for the copy to end by the first use (the prefetch;
  PyTorch's prefetch helper times nodes by benchmarking them on the GPU, where we have the
  cost model's estimates already).

One change to PyTorch's ops' arguments: each wait holds the transfer's source as
``last_use_of_storage``, not as ``keepalive``. ``keepalive`` makes the wait free the
source's storage (``resize_(0)``) behind Inductor's back; Inductor still counts the buffer
as its own, and once the wait is not the graph's last node it reuses it for a later
result, writing into a storage of 0 bytes (a crash, seen on this CPU with the stand-in).
PyTorch's pass is safe only because it sinks every wait to the end. With
``last_use_of_storage`` the wait is still the source's last use, so the source lives
until its copy is done, and then Inductor (or the graph's own last-use ``del``) frees it
or reuses it, as it would any buffer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import fx

from cost_model import DeviceProfile, SizeHints, tensor_bytes
from recompute_pass import torch_internals as ti
from recompute_pass.extract.extraction import Partition
from recompute_pass.offloading.link import backward_slots, forward_slots
from recompute_pass.offloading.problem import Transfer
from recompute_pass.offloading.schedule import node_seconds


def offload_partition(
    partition: Partition, names: Sequence[str], device: DeviceProfile, hints: SizeHints
) -> Partition:
    """``partition`` with the saved values ``names`` offloaded (``Partition.offloaded``
    says how each transfer runs); the graphs are copies."""
    chosen = [n for n in partition.saved if n in set(names)]
    if not chosen:
        return partition
    assert device.device_to_host_bandwidth is not None and device.host_to_device_bandwidth is not None
    forward = fx.GraphModule(partition.forward, _copy(partition.forward.graph))
    backward = fx.GraphModule(partition.backward, _copy(partition.backward.graph))
    ti.insert_offload_ops(forward, backward, chosen)
    sizes = {}
    for node in forward.graph.find_nodes(op="call_function", target=ti.ao_offload):
        source = node.args[0]
        assert isinstance(source, fx.Node)
        sizes[source.name] = hints.evaluate(tensor_bytes(source.meta["val"]))
    for module in (forward, backward):
        for wait in module.graph.find_nodes(op="call_function", target=ti.ao_wait_tensor):
            tensor, source = wait.args
            wait.args = (tensor, None, source)
    out = _place_forward_waits(forward, device, hints)
    back = _prefetch_reloads(backward, device, hints)
    for module in (forward, backward):
        module.graph.lint()
        module.recompile()
    transfers = tuple(
        Transfer(
            name=name,
            bytes=sizes[name],
            d2h_seconds=sizes[name] / device.device_to_host_bandwidth,
            h2d_seconds=sizes[name] / device.host_to_device_bandwidth,
            exposed_seconds=out.get(name, 0.0) + back.get(name, 0.0),
        )
        for name in chosen
    )
    return dataclasses.replace(partition, forward=forward, backward=backward, offloaded=transfers)


def _copy(graph: fx.Graph) -> fx.Graph:
    copy = fx.Graph()
    output = copy.graph_copy(graph, {})
    copy.output(output)
    return copy


def _compute(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in graph.nodes if n.op not in ("placeholder", "output")]


def _timed(
    graph: fx.Graph, device: DeviceProfile, hints: SizeHints
) -> tuple[list[fx.Node], list[float], dict[fx.Node, int]]:
    """The graph's compute nodes, each one's estimated seconds (transfers none), and its
    position among them: the timeline transfers are placed on."""
    nodes = _compute(graph)
    runtimes = [node_seconds(n, device, hints) if not _is_ao(n) else 0.0 for n in nodes]
    return nodes, runtimes, {n: k for k, n in enumerate(nodes)}


def _place_forward_waits(
    forward: fx.GraphModule, device: DeviceProfile, hints: SizeHints
) -> dict[str, float]:
    """Each offload's wait after the node during which its copy ends; exposed seconds."""
    assert device.device_to_host_bandwidth is not None
    nodes, runtimes, position = _timed(forward.graph, device, hints)
    transfers = []
    for node in forward.graph.find_nodes(op="call_function", target=ti.ao_offload):
        source = node.args[0]
        assert isinstance(source, fx.Node)
        size = hints.evaluate(tensor_bytes(source.meta["val"]))
        transfers.append((node, position[node], size / device.device_to_host_bandwidth))
    slots = forward_slots(runtimes, transfers)
    exposed: dict[str, float] = {}
    for node, slot in slots.items():
        (wait,) = [u for u in node.users if u.target is ti.ao_wait_tensor]
        if slot.position > position[node] and nodes[slot.position] is not wait:
            nodes[slot.position].append(wait)
        exposed[str(node.args[0])] = slot.exposed
    return exposed


def _prefetch_reloads(backward: fx.GraphModule, device: DeviceProfile, hints: SizeHints) -> dict[str, float]:
    """Each reload early enough that its copy ends by its wait (the first use)."""
    assert device.host_to_device_bandwidth is not None
    nodes, runtimes, position = _timed(backward.graph, device, hints)
    transfers = []
    for node in backward.graph.find_nodes(op="call_function", target=ti.ao_reload):
        value = node.meta["val"]
        assert isinstance(value, torch.Tensor)
        size = hints.evaluate(tensor_bytes(value))
        transfers.append((node, position[node], size / device.host_to_device_bandwidth))
    slots = backward_slots(runtimes, transfers)
    exposed: dict[str, float] = {}
    for node, slot in slots.items():
        if slot.position < position[node]:
            nodes[slot.position].prepend(node)
        placeholder = node.args[0]
        assert isinstance(placeholder, fx.Node)
        exposed[placeholder.name.removeprefix("cpu_offload_")] = slot.exposed
    return exposed


def _is_ao(node: fx.Node) -> bool:
    return node.target in (ti.ao_offload, ti.ao_reload, ti.ao_wait_tensor)
