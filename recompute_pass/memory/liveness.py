"""The step's memory over time, predicted from the graphs that will run.

Peak is defined once for the project: the max over one forward+backward of bytes
allocated, minus the bytes allocated just before the forward (parameters, buffers and the
batch are there already; parameter ``.grad`` are None). So the prediction walks the
forward graph, then the backward graph, in the order extraction emits them (backward is
reordered to mimic the autograd engine, which places recomputation just before its first
use), and keeps a running total:

- a node allocates its output when it runs, unless the output aliases another value
  (views, ``getitem`` of a multi-output op, in-place ops); while it runs, its kernel may
  hold a temporary of its own (``cost_model.workspace_bytes``);
- a value is freed after its last use (a view keeps its base alive until the view dies);
- forward outputs outlive the forward: saved tensors until their last backward use, user
  outputs (the loss) to the end of the step; backward outputs (gradients) to the end;
- tangents are allocated when backward starts.

This is what runs without codegen (``recompute_eager_backend``), exact to the allocator
there. Inductor runs the graphs otherwise (fusion, reordering, a reuse pool, in-place
writes), so under ``torch.compile`` the peak comes from Inductor's own plan
(``inductor_memory``); this walk stays the fast estimate that ranks plans
(``plan_peak``). Sizes are evaluated at the graph's size hints.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import torch
from torch import fx

from cost_model import OpKind, SizeHints, classify, tensor_bytes, tensor_workspace_bytes
from recompute_pass import torch_internals as ti

# Results held in host memory, not on the device: an offloaded value's copy
# (``recompute_pass.offloading.problem``) is off the device from its offload's wait, which frees the
# device copy, to its reload, which allocates a new one.
OFF_DEVICE_OPS = frozenset({ti.ao_offload})


@dataclass(frozen=True)
class PeakEstimate:
    """Predicted live bytes over one step and where they peak."""

    peak_bytes: int
    peak_phase: str  # "forward" or "backward"
    peak_node: str  # the node whose allocation reaches the peak
    timeline: tuple[tuple[str, str, int], ...]  # (phase, node, live bytes as it runs)
    model: str = "graph"  # "graph": the graphs walked as emitted (here); "inductor": ``inductor_memory``
    note: str = ""  # why the model is not the one asked for, if it is not
    # Inductor config the backward is to be compiled under for this peak (``inductor_memory``).
    compile_patches: tuple[tuple[str, object], ...] = ()
    # What a step of several graphs needs of this one (``recompute_pass.step``): the live
    # bytes when the forward ends (its outputs and what it saved), of them the user
    # outputs the caller holds, and the incoming gradients allocated when backward starts.
    forward_end: int = 0
    caller_bytes: int = 0
    tangent_bytes: int = 0

    def with_boundaries(self, forward_end: int, caller_bytes: int, tangent_bytes: int) -> PeakEstimate:
        return dataclasses.replace(
            self, forward_end=forward_end, caller_bytes=caller_bytes, tangent_bytes=tangent_bytes
        )

    @staticmethod
    def of(timeline: Sequence[tuple[str, str, int]], model: str = "graph") -> PeakEstimate:
        """The estimate a timeline gives: its highest entry, the earliest on a tie."""
        if not timeline:
            return PeakEstimate(0, "forward", "", (), model=model)
        phase, node, peak = max(timeline, key=lambda entry: entry[2])  # max keeps the first
        return PeakEstimate(peak, phase, node, tuple(timeline), model=model)


class NodeFacts:
    """What the walk asks of a node, computed once: scoring many plans of one graph asks
    the same questions of the same nodes."""

    def __init__(self, hints: SizeHints) -> None:
        self.hints = hints
        self._kinds: dict[fx.Node, OpKind] = {}
        self._bytes: dict[tuple[fx.Node, str], int] = {}
        self._workspace: dict[fx.Node, int] = {}
        self._inputs: dict[fx.Node, tuple[fx.Node, ...]] = {}
        self._aliases: dict[fx.Node, bool] = {}
        self._is_result: dict[fx.Node, bool] = {}
        self._multi: dict[fx.Node, bool] = {}

    def inputs(self, node: fx.Node) -> tuple[fx.Node, ...]:
        """``node.all_input_nodes``, built once (fx builds a new list on every call)."""
        found = self._inputs.get(node)
        if found is None:
            found = self._inputs[node] = tuple(node.all_input_nodes)
        return found

    def aliases(self, node: fx.Node) -> bool:
        """Whether the node shares its first input's storage (a view, an in-place op)."""
        found = self._aliases.get(node)
        if found is None:
            found = self._aliases[node] = (
                node.op == "call_function" and bool(self.inputs(node)) and _aliases_input(node, self.kind)
            )
        return found

    def is_result(self, node: fx.Node) -> bool:
        """``_is_result``, once per node."""
        found = self._is_result.get(node)
        if found is None:
            found = self._is_result[node] = _is_result(node)
        return found

    def is_multi_output(self, node: fx.Node) -> bool:
        """Whether the node's value is a tuple of results (``_results``)."""
        found = self._multi.get(node)
        if found is None:
            found = self._multi[node] = isinstance(node.meta.get("val"), list | tuple)
        return found

    def kind(self, node: fx.Node) -> OpKind:
        kind = self._kinds.get(node)
        if kind is None:
            kind = self._kinds[node] = classify(node)
        return kind

    def bytes(self, node: fx.Node, owner: str, value: object) -> int:
        """Bytes of ``value``, a result of ``node`` held by ``owner``."""
        size = self._bytes.get((node, owner))
        if size is None:
            off_device = node.target in OFF_DEVICE_OPS
            size = self._bytes[(node, owner)] = 0 if off_device else self.hints.evaluate(tensor_bytes(value))
        return size

    def workspace(self, node: fx.Node) -> int:
        """Bytes the node's kernel holds only while it runs (``cost_model.workspace_bytes``)."""
        size = self._workspace.get(node)
        if size is None:
            tensors = [v for n in node.all_input_nodes if isinstance(v := n.meta.get("val"), torch.Tensor)]
            outputs = [v for v in _flat(node.meta.get("val")) if isinstance(v, torch.Tensor)]
            device_type = outputs[0].device.type if outputs else "cpu"
            op, replayed = node.target, node.args[1] if node.target is ti.run_with_rng_state else None
            if op is ti.run_and_save_rng_state:  # the op it runs, with no state among its inputs
                op = node.args[0]
            size = tensor_workspace_bytes(op, device_type, tensors, self.hints, replayed=replayed)
            self._workspace[node] = size
        return size


def _flat(value: object) -> list[object]:
    """A node's value, a multi-output op's results flattened."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flat(item)]
    return [value]


class Walk:
    """A running total of live bytes over the nodes of one step, in the order they run."""

    def __init__(self, facts: NodeFacts) -> None:
        self.facts = facts
        self.live = 0
        self.sizes: dict[str, int] = {}  # storage name -> bytes, while live (across phases)
        self.timeline: list[tuple[str, str, int]] = []

    def allocate(self, node: fx.Node, owner: str, value: object) -> None:
        self.allocate_bytes(owner, self.facts.bytes(node, owner, value))

    def allocate_bytes(self, owner: str, size: int) -> None:
        self.sizes[owner] = self.sizes.get(owner, 0) + size
        self.live += size

    def free(self, owner: str) -> None:
        self.live -= self.sizes.pop(owner, 0)  # inputs that predate the step were never counted

    def run(
        self,
        phase: str,
        nodes: Sequence[fx.Node],
        kept: set[fx.Node],
        *,
        extra: Mapping[str, int] = MappingProxyType({}),
        releases: Collection[str] = (),
    ) -> None:
        """``kept``: storages that outlive this phase. ``extra``: more bytes a node
        allocates (by its name), held as ``<name>.extra`` until a node of that name in
        ``releases`` runs (a draw's generator state, saved until its replay)."""
        facts = self.facts
        members = set(nodes)
        storage = _storages(nodes, facts)
        frees = _frees(nodes, storage, kept, facts)
        for position, node in enumerate(nodes):
            workspace = 0
            if node.op == "call_function":
                if storage[node] is node and not facts.is_result(node):
                    if facts.is_multi_output(node):
                        # Every result is allocated; each lives as long as its getitem.
                        for owner, value in _results(node, members).items():
                            self.allocate(node, owner, value)
                    else:
                        self.allocate(node, node.name, node.meta.get("val"))
                    if node.name in extra:
                        self.allocate_bytes(f"{node.name}.extra", extra[node.name])
                workspace = facts.workspace(node)
            self.timeline.append((phase, node.name, self.live + workspace))
            for name in frees.get(position, ()):
                self.free(name)
            if node.name in releases:
                self.free(f"{node.name}.extra")

    def estimate(self) -> PeakEstimate:
        return PeakEstimate.of(self.timeline)

    def held_by(self, nodes: Sequence[fx.Node], outputs: Collection[fx.Node]) -> int:
        """Live bytes of the storages of ``outputs`` (nodes of ``nodes``, in run order),
        each storage once."""
        storage = _storages(nodes, self.facts)
        owners = {storage.get(node, node).name for node in outputs}
        return sum(self.sizes.get(name, 0) for name in owners)


def predict_peak(
    forward: fx.GraphModule,
    backward: fx.GraphModule,
    *,
    num_user_outputs: int,
    hints: SizeHints,
) -> PeakEstimate:
    """Walk both graphs; ``num_user_outputs`` leading forward outputs are the user's."""
    walk = Walk(NodeFacts(hints))
    forward_nodes = list(forward.graph.nodes)
    walk.run("forward", forward_nodes, _graph_outputs(forward))
    forward_end = walk.live
    users = [v for v in _outputs(forward)[:num_user_outputs] if isinstance(v, fx.Node)]
    caller = walk.held_by(forward_nodes, users)
    sent = backward_names(forward, backward, num_user_outputs)
    for value, name in zip(_outputs(forward), sent, strict=True):
        # A saved value may reach backward under another name (a generator state saved by
        # ``run_and_save_rng_state``): its storage is freed under the backward's.
        if (
            isinstance(value, fx.Node)
            and name is not None
            and name != value.name
            and value.name in walk.sizes
        ):
            walk.sizes[name] = walk.sizes.pop(value.name)
    placeholders = backward.graph.find_nodes(op="placeholder")
    for tangent in placeholders:
        if ti.is_tangent(tangent) and isinstance(tangent.meta.get("val"), torch.Tensor):
            walk.allocate(tangent, tangent.name, tangent.meta["val"])  # autograd's incoming gradient
    tangents = walk.live - forward_end
    walk.run("backward", list(backward.graph.nodes), _graph_outputs(backward))
    return walk.estimate().with_boundaries(forward_end, caller, tangents)


def backward_names(
    forward: fx.GraphModule, backward: fx.GraphModule, num_user_outputs: int
) -> list[str | None]:
    """Each forward output's name where it is used: the user's outputs their own, saved
    values the backward placeholder that receives them (None: not a graph value).

    AOTAutograd's contract: the forward returns the user's outputs, the saved tensors, then
    the saved SymInts; the backward takes the saved SymInts, the saved tensors, then the
    tangents. So tensors and SymInts pair by position each among their own kind; names
    differ for generator states (``rng_state_output_*``)."""
    outputs = list(_outputs(forward))
    names = [value.name if isinstance(value, fx.Node) else None for value in outputs]
    received = [p for p in backward.graph.find_nodes(op="placeholder") if not ti.is_tangent(p)]
    saved = outputs[num_user_outputs:]
    for tensors in (True, False):
        sent = [i for i, value in enumerate(saved) if _is_tensor(value) == tensors]
        got = [p for p in received if _is_tensor(p) == tensors]
        if len(sent) == len(got):
            for index, placeholder in zip(sent, got, strict=True):
                names[num_user_outputs + index] = placeholder.name
    return names


def _is_tensor(value: object) -> bool:
    return isinstance(value, fx.Node) and isinstance(value.meta.get("val"), torch.Tensor)


def _outputs(graph: fx.GraphModule) -> Sequence[object]:
    (output,) = graph.graph.find_nodes(op="output")
    values = output.args[0]
    return values if isinstance(values, list | tuple) else (values,)


def _graph_outputs(graph: fx.GraphModule) -> set[fx.Node]:
    return {n for n in _outputs(graph) if isinstance(n, fx.Node)}


def _results(node: fx.Node, members: Collection[fx.Node], val: object = None) -> dict[str, object]:
    """The values ``node`` allocates, by the name of the storage that holds each: its own
    for one tensor; for a multi-output op, each result's getitem, through nested tuples
    (results nobody reads are held by the op's own name and freed after it)."""
    val = node.meta.get("val") if val is None else val
    if not isinstance(val, list | tuple):
        return {node.name: val}
    readers = {u.args[1]: u for u in node.users if u.target is operator.getitem and u in members}
    results: dict[str, object] = {}
    for index, value in enumerate(val):
        reader = readers.get(index)
        parts = _results(reader, members, value) if reader is not None else {node.name: value}
        for owner, part in parts.items():
            results[owner] = (*results.get(owner, ()), part)  # type: ignore[misc]
    return results


def _is_result(node: fx.Node) -> bool:
    """A getitem that takes a result of a multi-output op (allocated by the op)."""
    parent = node.args[0] if node.target is operator.getitem else None
    return isinstance(parent, fx.Node) and isinstance(parent.meta.get("val"), list | tuple)


def _aliases_input(node: fx.Node, kind: Callable[[fx.Node], OpKind]) -> bool:
    """Views and in-place ops share an input's storage."""
    if node.target is operator.getitem:
        return not _is_result(node)
    return kind(node) is OpKind.VIEW or ti.returns_an_alias(node.target)


def storage_base(node: fx.Node) -> fx.Node:
    """The node whose storage ``node`` shares, through views and in-place ops (itself if none)."""
    while node.op == "call_function" and node.all_input_nodes and _aliases_input(node, classify):
        node = node.all_input_nodes[0]
    return node


def _storages(nodes: Sequence[fx.Node], facts: NodeFacts) -> dict[fx.Node, fx.Node]:
    """Each node's storage owner: itself, or (through views) the value it aliases, which
    may come from an earlier phase."""
    owner: dict[fx.Node, fx.Node] = {}
    for node in nodes:
        if facts.aliases(node):
            base = facts.inputs(node)[0]
            owner[node] = owner.get(base, base)
        else:
            owner[node] = node
    return owner


def _frees(
    nodes: Sequence[fx.Node], storage: dict[fx.Node, fx.Node], kept: set[fx.Node], facts: NodeFacts
) -> dict[int, list[str]]:
    """Storage names freed after each position: at the last use of the storage or of any
    view of it; never what outlives the phase (``kept``, or a view of it)."""
    last: dict[fx.Node, int] = {}
    for position, node in enumerate(nodes):
        last[storage.get(node, node)] = position
        for value in facts.inputs(node):
            last[storage.get(value, value)] = position
    kept_storage = {storage.get(node, node) for node in kept}
    frees: dict[int, list[str]] = {}
    for owner, position in last.items():
        if owner not in kept_storage:
            frees.setdefault(position, []).append(owner.name)
    return frees
