"""The step's memory as Inductor will run it: the peak model under ``torch.compile``.

Inductor does not run the partitioned graphs node by node, so walking them
(``liveness``) mispredicts its peak; measured through Inductor on CPU, by -16% to +26%
on the benchmark zoo. What decides its memory, all of it in Inductor's own passes:

- fusion: a buffer produced and last used inside one kernel is never allocated;
- order: the scheduler places a fused kernel at its earliest member and may reorder for
  memory;
- in place: a kernel writes its output over a dying input of the same size, donated
  backward inputs (saved activations) included;
- the wrapper's reuse pool: a freed buffer is held for a later allocation of the same
  size when Inductor's *estimate* of the peak in between allows it; that estimate counts
  every buffer, fused ones too, so buffers are often held across a later, higher point;
- on CPU, consecutive C++ kernels run as one call: their outputs are allocated before
  it and what died is freed after it;
- layouts: the backward sees the strides the compiled forward produced (channels-last
  under Inductor's layout optimisation); a concatenation's inputs are slices of one
  buffer; a multi-output kernel allocates every result;
- kernels' own temporaries (``cost_model.workspace_bytes``).

So this model asks Inductor: each graph goes through Inductor's compile up to its
scheduler (``torch_internals.inductor_lowering``: no code is generated, so it costs the
lowering, about a second per graph of the zoo's 2-layer models on 2 CPU cores), and
``_WrapperPlan`` replays the memory planning of torch 2.13's Python wrapper
(``PythonWrapperCodegen``: ``AllocateLine``, ``FreeIfNotReusedLine``,
``decide_inplace_update``, ``remove_kernel_local_buffers``) on the scheduled kernels. The
forward's outputs carry over to the backward, which frees its donated inputs at their
last use. ``tests/inductor/test_inductor_memory.py`` checks it against the allocator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sympy
import torch
from torch import fx

from cost_model import SizeHints, tensor_bytes, workspace_bytes
from recompute_pass import torch_internals as ti
from recompute_pass.memory.liveness import PeakEstimate, backward_names

ir = ti.inductor_ir

# ``score_fusion_memory_threshold`` above any buffer's bytes: no horizontal fusion.
NO_HORIZONTAL_FUSION = 2**62


@dataclass(frozen=True)
class Event:
    """One memory event of a compiled graph, in the order the wrapper runs them.

    ``alloc``: a new storage of ``size`` bytes named ``name``; ``alias``: ``name`` is a
    view of ``other``'s storage; ``take``: ``name`` takes over ``other``'s storage (an
    in-place write, or a reused buffer); ``free``: ``name`` lets go of its storage;
    ``workspace``: ``size`` bytes held only while kernel ``name`` runs.
    """

    kind: str
    name: str
    size: int = 0
    other: str = ""
    label: str = ""  # the graph node the kernel computes, for timelines


@dataclass(frozen=True)
class GraphPlan:
    events: tuple[Event, ...]
    inputs: tuple[str, ...]  # placeholder names, in order
    outputs: tuple[str | None, ...]  # per graph output: the storage holding it (None: not a tensor)
    output_strides: tuple[tuple[sympy.Expr, ...] | None, ...]  # symbolic under dynamic shapes


def plan_graph(
    graph: fx.GraphModule,
    *,
    is_backward: bool,
    donated: Sequence[int] = (),
    input_strides: dict[str, tuple[sympy.Expr, ...]] | None = None,
    variants: Sequence[dict[str, object]] = ({},),
    without_reuse: bool = False,
) -> list[tuple[dict[str, object], GraphPlan]]:
    """Inductor's memory events for ``graph`` (left unchanged) under each of ``variants``
    (config patches), and (``without_reuse``, where the config reuses buffers) each also
    with Inductor's buffer reuse off: the reuse is decided in the wrapper, after
    scheduling. Variants that differ only in the scheduler's config share one lowering.
    Each plan comes with the config it assumes, in the order of ``variants``.
    ``input_strides``: the strides placeholders really have (the compiled forward's
    output strides)."""
    lowerings: dict[tuple[tuple[str, object], ...], list[dict[str, object]]] = {}
    for variant in variants:
        lowered = tuple(sorted((k, v) for k, v in variant.items() if k not in ti.SCHEDULER_CONFIG))
        lowerings.setdefault(lowered, []).append(variant)
    plans: dict[int, list[tuple[dict[str, object], GraphPlan]]] = {}
    for lowered, scheduled in lowerings.items():
        copy = _with_input_strides(_copy(graph), input_strides or {})
        order = {node: i for i, node in enumerate(copy.graph.nodes)}
        lowering_of = ti.inductor_lowering(
            copy, is_backward=is_backward, donated=donated, patches=dict(lowered)
        )
        with lowering_of as (lowering, schedule):
            for variant in scheduled:
                scheduler = schedule({k: v for k, v in variant.items() if k in ti.SCHEDULER_CONFIG})
                configs = planned_configs(variant, without_reuse)
                plans[id(variant)] = [
                    (config, _plan_of(lowering, scheduler, order, reuse=reuse)) for config, reuse in configs
                ]
    return [plan for variant in variants for plan in plans[id(variant)]]


def planned_configs(variant: dict[str, object], without_reuse: bool) -> list[tuple[dict[str, object], bool]]:
    """The configs ``plan_graph`` plans ``variant`` under, each with whether it reuses
    buffers: the variant, and the variant without reuse where asked and reuse is on."""
    reuse = bool(variant.get("allow_buffer_reuse", ti.inductor_config.allow_buffer_reuse))
    configs = [(dict(variant), reuse)]
    if without_reuse and reuse:
        configs.append(({**variant, "allow_buffer_reuse": False}, False))
    return configs


def compiled_plan(lowering: object, scheduler: object) -> GraphPlan:
    """The memory events of a graph Inductor's real compile has just scheduled, under the
    config it runs with: what ``plan_graph`` predicts, read off the compile itself."""
    order = {node: i for i, node in enumerate(lowering.graph.nodes)}  # type: ignore[attr-defined]
    return _plan_of(lowering, scheduler, order, reuse=bool(ti.inductor_config.allow_buffer_reuse))


def _plan_of(lowering: object, scheduler: object, order: dict[fx.Node, int], *, reuse: bool) -> GraphPlan:
    events = tuple(_WrapperPlan(lowering, scheduler, order, reuse=reuse).run())
    outputs = tuple(_storage_name(out) for out in lowering.graph_outputs)  # type: ignore[attr-defined]
    strides = tuple(_strides(out) for out in lowering.graph_outputs)  # type: ignore[attr-defined]
    return GraphPlan(events, tuple(lowering.graph_inputs), outputs, strides)  # type: ignore[attr-defined]


def _with_input_strides(
    copy: fx.GraphModule, input_strides: dict[str, tuple[sympy.Expr, ...]]
) -> fx.GraphModule:
    """``copy``'s placeholders with the strides they really have, as fake tensors."""
    fake_mode = ti.detect_fake_mode([n.meta.get("val") for n in copy.graph.find_nodes(op="placeholder")])
    for node in copy.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        if not ti.is_fake_tensor(val):  # a generator state tensor
            val = fake_mode.from_tensor(val)
        stride = input_strides.get(node.name)
        if stride is not None and not _same_strides(val.stride(), stride):
            with fake_mode:
                val = val.as_strided(val.size(), [ti.symint_of(fake_mode.shape_env, s) for s in stride])
        node.meta = {**node.meta, "val": val}  # the copy's meta, not the caller's
    return copy


# ``plan_graph``, or what stands in for it with the same keywords
# (``composed.PieceLowerings.plan_graph``).
GraphPlanner = Callable[..., list[tuple[dict[str, object], GraphPlan]]]


def predict_peak(
    forward: fx.GraphModule,
    backward: fx.GraphModule,
    *,
    num_user_outputs: int,
    hints: SizeHints,
    planner: GraphPlanner = plan_graph,
) -> PeakEstimate:
    """Replay both graphs' plans; the forward's outputs live on as the backward's inputs.
    ``hints``: the forward graph's size hints: Inductor sizes every buffer at them (the
    shape env's hints are set to them meanwhile), and the tangents autograd allocates."""
    env = ti.detect_fake_mode([n.meta.get("val") for n in forward.graph.find_nodes(op="placeholder")])
    with ti.shape_env_hints(env.shape_env if env is not None else None, dict(hints.values)):
        return _predict_peak(forward, backward, num_user_outputs, hints, planner)


def _predict_peak(
    forward: fx.GraphModule,
    backward: fx.GraphModule,
    num_user_outputs: int,
    hints: SizeHints,
    planner: GraphPlanner,
) -> PeakEstimate:
    memory = _Storages()
    (_, fwd), *_ = planner(forward, is_backward=False)
    for name in fwd.inputs:
        memory.bind_external("forward", name)
    memory.replay(fwd.events, "forward")
    outputs = backward_names(forward, backward, num_user_outputs)
    carried = {
        name: sid
        for name, store in zip(outputs, fwd.outputs, strict=True)
        if name is not None and (sid := memory.owner("forward", store)) is not None
    }
    users = {carried[name] for name in outputs[:num_user_outputs] if name in carried}
    for sid in users:  # the loss: the caller holds it
        memory.keep(sid)
    donated, tangents = [], 0
    for index, node in enumerate(backward.graph.find_nodes(op="placeholder")):
        if node.name in carried:
            memory.bind("backward", node.name, carried[node.name])
            if not memory.is_kept(carried[node.name]):
                donated.append(index)
        elif ti.is_tangent(node) and isinstance(node.meta.get("val"), torch.Tensor):
            size = hints.evaluate(tensor_bytes(node.meta["val"]))
            memory.alloc("backward", node.name, size, node.name)
            tangents += size
        else:  # a forward input handed to backward (a parameter, the batch)
            memory.bind_external("backward", node.name)
    memory.release("forward")  # only what the backward received stays referenced
    forward_end, caller = memory.live - tangents, sum(memory.size[sid] for sid in users)
    strides = {
        name: stride
        for name, stride in zip(outputs, fwd.output_strides, strict=True)
        if name is not None and stride is not None
    }
    best = None
    planned = planner(
        backward,
        is_backward=True,
        donated=donated,
        input_strides=strides,
        variants=_backward_variants(),
        without_reuse=True,
    )
    for config, bwd in planned:
        run = memory.copy()
        run.replay(bwd.events, "backward")
        estimate = dataclasses.replace(run.estimate(), compile_patches=tuple(sorted(config.items())))
        estimate = estimate.with_boundaries(forward_end, caller, tangents)
        if best is None or estimate.peak_bytes < best.peak_bytes:
            best = estimate
    assert best is not None
    return best


def _backward_variants() -> list[dict[str, object]]:
    """The configs the backward is planned under: the user's, and one in which Inductor
    keeps the partitioner's order; the partitioner compiles the backward under the one
    that peaks lower. Two of Inductor's heuristics move a recomputing backward's work
    against its placement, and rank the result by an estimate that misses it:

    - ``reorder_for_peak_memory`` keeps the order its own estimate prefers and can pull
      recomputation ahead of where the partitioner placed it;
    - horizontal fusion (kernels that share inputs but no data flow, gated alone by
      ``score_fusion_memory_threshold`` in torch 2.13) fuses a recomputed tensor's
      consumers into one late kernel, so what was rebuilt to be freed early stays live
      beside the gradients (nanoGPT's attention: the recomputed dropout output beside its
      own gradient).

    Measured on the zoo at budget 0: nanoGPT at 432 tokens 114 MiB with both, 95 MiB
    without; Llama at 1040 tokens 95 MiB without the reordering alone, 84 MiB without both.
    One variant, not one per heuristic: each costs a scheduling of the lowering (both
    heuristics are the scheduler's, so the variants share the lowering itself).
    """
    changed = {key: value for key, value in IN_ORDER.items() if getattr(ti.inductor_config, key) != value}
    return [{}, changed] if changed else [{}]


# The scheduler config under which Inductor keeps the partitioner's order (``_backward_variants``).
IN_ORDER: dict[str, object] = {
    "reorder_for_peak_memory": False,
    "score_fusion_memory_threshold": NO_HORIZONTAL_FUSION,
}


def keeps_order(config: dict[str, object]) -> bool:
    """Whether ``config`` (patches over Inductor's current config) keeps the partitioner's
    order: no pass then moves work across the whole graph."""
    return all(config.get(key, getattr(ti.inductor_config, key)) == value for key, value in IN_ORDER.items())


class _WrapperPlan:
    """The wrapper's memory lines for one scheduled graph, as events."""

    def __init__(
        self, lowering: object, scheduler: object, order: dict[fx.Node, int], *, reuse: bool
    ) -> None:
        self.lowering = lowering
        self.reuse = reuse  # ``config.allow_buffer_reuse``: freed buffers go to a pool
        self.order = order
        self.scheduler = scheduler
        self.nodes = list(scheduler.nodes)  # type: ignore[attr-defined]
        self.sizes = ti.compute_size_for_scheduler_buffer(scheduler.name_to_buf)  # type: ignore[attr-defined]
        self.outputs = set(lowering.get_output_names())  # type: ignore[attr-defined]
        graph_inputs = set(lowering.graph_inputs)  # type: ignore[attr-defined]
        self.graph_inputs = graph_inputs
        freeable = ti.get_freeable_input_buf(self.nodes, graph_inputs)
        # Inductor's own estimate, by node: what its reuse decisions are made against.
        self.estimated_peak, steps = ti.estimate_peak_memory(self.nodes, freeable, self.outputs)
        self.estimate = list(steps)
        self.events: list[Event] = []
        self.removed: set[str] = set()
        self.taken: set[str] = set()  # inputs of in-place writes: their storage moved on
        self.freed: set[str] = set()
        self.allocated: set[str] = set()
        self.completed: set[str] = set()
        self.to_free: set[str] = set()
        self.pool: dict[object, list[tuple[str, int]]] = {}  # reuse key -> [(name, node index)]
        self.group_args = 0

    def run(self) -> list[Event]:
        device = None
        for index, node in enumerate(self.nodes):
            node_device = node.get_device()
            if node_device is not None and (node_device != device or node.is_extern() or node.is_template()):
                self._flush(index - 1)
            device = node_device or device
            self.to_free.update(node.last_usage)
            label = _label(node, self.order)
            if isinstance(node, ti.NopKernelSchedulerNode):
                for buf in node.get_outputs():
                    if buf.node.should_allocate():
                        self._allocate(buf, index, label)
            elif node.is_extern() or node.is_template():
                for buf in node.get_outputs():
                    self._allocate(buf, index, label)
                workspace = _workspace(node)
                if workspace:
                    self.events.append(Event("workspace", node.get_name(), workspace, label=label))
                self._flush(index)
            else:
                self._kernel(node, index, label)
            self.completed.update(node.get_operation_names())
        self._flush(len(self.nodes) - 1)
        return self.events

    def _kernel(self, node: object, index: int, label: str) -> None:
        """One fused kernel, as Inductor's codegen runs it: each member's in-place writes
        decided in order (over inputs that die here, the kernel's own earlier results
        among them), then kernel-local buffers removed (``remove_kernel_local_buffers``),
        except those an in-place write ties to a buffer that stays."""
        members = set(node.get_operation_names())  # type: ignore[attr-defined]
        scheduler = self.scheduler
        outputs = [(sub, buf) for sub in node.get_nodes() for buf in sub.get_outputs()]  # type: ignore[attr-defined]
        local = set()
        for _, buf in outputs:
            name = buf.get_name()
            users = [u for u in buf.users if not u.is_weak]
            if (
                users
                and name not in self.outputs
                and all(u.get_name() in members for u in users)
                and name not in scheduler.mutation_renames  # type: ignore[attr-defined]
                and name not in scheduler.mutation_real_name  # type: ignore[attr-defined]
            ):
                local.add(name)  # kernel-local: never allocated, unless written over in place
        sources: dict[str, str] = {}
        for sub, buf in outputs:
            source = self._in_place_source(sub, buf)
            if source is not None:
                sources[buf.get_name()] = source
                self.taken.add(source)
        self.removed |= _removable(local, sources)
        for _, buf in outputs:
            name = buf.get_name()
            if name in self.removed:
                continue
            if name in sources:
                self._take(buf, sources[name], label)
            elif buf.node.should_allocate():
                self._allocate(buf, index, label)
        reads = node.read_writes.reads  # type: ignore[attr-defined]
        self.group_args += len(reads) + len(node.get_outputs())  # type: ignore[attr-defined]
        if self.group_args > ti.CPP_MAX_KERNEL_GROUP_ARGS or node.get_device().type != "cpu":  # type: ignore[attr-defined]
            self._flush(index)  # GPU backends free after each kernel

    def _allocate(self, buf: object, index: int, label: str) -> None:
        name = buf.get_name()  # type: ignore[attr-defined]
        if name in self.allocated:
            return
        self.allocated.add(name)
        layout = buf.node.layout  # type: ignore[attr-defined]
        if isinstance(layout, ir.NonOwningLayout):  # a slice of a concatenation's buffer
            target = _storage_name(layout.view)
            if target is not None and target in self.scheduler.name_to_buf:  # type: ignore[attr-defined]
                self._allocate(self.scheduler.name_to_buf[target], index, label)  # type: ignore[attr-defined]
            self.events.append(Event("alias", name, other=target or ""))
            return
        if isinstance(layout, ir.MultiOutputLayout):  # the kernel returns every result at once
            # A fallback view op (``view_as_complex``, ``view_as_real``) returns views of its
            # input: no storage of its own.
            viewed = _viewed_input(buf.node)  # type: ignore[attr-defined]
            for user in buf.users:  # type: ignore[attr-defined]
                # The graph's output node reads the buffer too (a complex product): no results.
                for result in getattr(user.node, "get_outputs", tuple)():
                    if isinstance(result.node, ir.MultiOutput) and result.get_name() not in self.allocated:
                        self.allocated.add(result.get_name())
                        if viewed is not None:
                            self.events.append(Event("alias", result.get_name(), other=viewed))
                            continue
                        size = self.sizes[result.get_name()][1]
                        self.events.append(Event("alloc", result.get_name(), size, label=label))
            if viewed is None:
                # Results no one reads have no buffer of their own, but the kernel made them:
                # they live in its returned tuple until the wrapper deletes it (``del bufN``
                # under the fallback's name).
                unread = _unread_results_bytes(buf.node, self.allocated)  # type: ignore[attr-defined]
                if unread:
                    self.events.append(Event("alloc", name, unread, label=label))
            return
        size = self.sizes[name][0]
        if size == 0:
            return
        key = _reuse_key(buf.node)  # type: ignore[attr-defined]
        if key is not None and self.pool.get(key):
            candidate, freed_at = self.pool[key][-1]
            gap = self.estimate[freed_at + 1 : index]
            # AllocateLine.should_reuse_buffer: adjacent, or no higher than Inductor's estimated peak.
            if freed_at + 1 == index or size + max(gap, default=0) <= self.estimated_peak:
                self.pool[key].pop()
                for k in range(freed_at + 1, index):
                    self.estimate[k] += size
                self.events.append(Event("take", name, other=candidate))
                return
        self.events.append(Event("alloc", name, size, label=label))

    def _in_place_source(self, node: object, buf: object) -> str | None:
        """``SchedulerNode.decide_inplace_update``: the one input that dies here and that
        ``buf`` is written over, if any."""
        if not isinstance(node, ti.SchedulerNode):
            return None
        out = buf.node  # type: ignore[attr-defined]
        if (
            not out.should_allocate()
            or out.get_inputs_that_alias_output()
            or out.get_mutation_names()
            or buf.get_name() in self.removed  # type: ignore[attr-defined]
        ):
            return None
        scheduler = self.scheduler
        done = node.ancestors | self.lowering.removed_operations | self.completed  # type: ignore[attr-defined]
        for read in node.read_writes.reads:
            name = read.name
            donated = scheduler.name_to_donated_buffer.get(name)  # type: ignore[attr-defined]
            source = donated if donated is not None else scheduler.name_to_buf.get(name)  # type: ignore[attr-defined]
            if source is None or name in self.removed or name in self.taken or name in self.freed:
                continue
            if name in self.graph_inputs and donated is None:
                continue
            if isinstance(source.defining_op, ti.NopKernelSchedulerNode) or source.node is None:
                continue
            remaining = [u for u in source.users if u.node.get_name() not in done]
            if not (len(remaining) == 1 and remaining[0].can_inplace and remaining[0].node is node):
                continue
            spec = source.node.get_output_spec()
            if isinstance(spec, (ir.NoneLayout, ir.MultiOutputLayout, ir.MutationLayoutSHOULDREMOVE)):
                continue
            if _aliasing_fallback_output(source) or not ti.can_match_buffer_size(source.node, out):
                continue
            if not _single_index_in_fused_node(scheduler, node, source):
                continue
            return name
        return None

    def _take(self, buf: object, source: str, label: str) -> None:
        """``buf`` written over ``source``'s storage."""
        # ``KernelArgs.make_inplace``: written over an unaligned buffer (on CPU every
        # graph input), the output is unaligned too, so the pool never gives it to an
        # aligned allocation (``buffer_reuse_key``).
        unaligned = self.lowering.unaligned_buffers  # type: ignore[attr-defined]
        if source in unaligned:
            unaligned.add(buf.get_name())  # type: ignore[attr-defined]
        self.events.append(Event("take", buf.get_name(), other=source, label=label))  # type: ignore[attr-defined]

    def _flush(self, index: int) -> None:
        """``Scheduler.free_buffers``: what died since the last call; buffers go to the pool."""
        name_to_buf = self.scheduler.name_to_buf  # type: ignore[attr-defined]
        for name in sorted(self.to_free - self.removed - self.freed - self.taken):
            if name in name_to_buf and name not in self.graph_inputs:
                if not name_to_buf[name].can_free():
                    continue
                self.freed.add(name)
                key = _reuse_key(name_to_buf[name].node) if self.reuse else None
                if key is not None:
                    self.pool.setdefault(key, []).append((name, index))
                self.events.append(Event("free", name))  # undone if a later allocation takes it
            elif name in self.graph_inputs:
                self.freed.add(name)
                self.events.append(Event("free", name))
        self.to_free.clear()
        self.group_args = 0


class _Storages:
    """Live bytes over a replay of plan events. Names (per phase: the two graphs' names
    collide) share storages; a storage is freed when its last name goes, unless kept (a
    tensor the caller holds)."""

    def __init__(self) -> None:
        self.names: dict[tuple[str, str], int] = {}
        self.refs: list[int] = []
        self.size: list[int] = []
        self.kept: set[int] = set()
        self.live = 0
        self.timeline: list[tuple[str, str, int]] = []

    def alloc(self, phase: str, name: str, size: int, label: str) -> None:
        self.size.append(size)
        self.refs.append(0)
        self.bind(phase, name, len(self.size) - 1)
        self.live += size
        self.timeline.append((phase, label, self.live))

    def bind_external(self, phase: str, name: str) -> None:
        """A tensor that predates the step (a parameter, the batch): never counted."""
        self.size.append(0)
        self.refs.append(0)
        self.kept.add(len(self.size) - 1)
        self.bind(phase, name, len(self.size) - 1)

    def bind(self, phase: str, name: str, sid: int) -> None:
        self.free(phase, name)
        self.names[(phase, name)] = sid
        self.refs[sid] += 1

    def free(self, phase: str, name: str) -> None:
        sid = self.names.pop((phase, name), None)
        if sid is None:
            return
        self.refs[sid] -= 1
        if self.refs[sid] == 0 and sid not in self.kept and self.size[sid]:
            self.live -= self.size[sid]
            self.timeline.append((phase, name, self.live))

    def release(self, phase: str) -> None:
        for key in [key for key in self.names if key[0] == phase]:
            self.free(*key)

    def owner(self, phase: str, name: str | None) -> int | None:
        return None if name is None else self.names.get((phase, name))

    def keep(self, sid: int) -> None:
        self.kept.add(sid)

    def is_kept(self, sid: int) -> bool:
        return sid in self.kept

    def replay(self, events: Sequence[Event], phase: str) -> None:
        pooled = {e.other for e in events if e.kind == "take"}  # freed, then taken: stays allocated
        for event in events:
            if event.kind == "alloc":
                self.alloc(phase, event.name, event.size, event.label or event.name)
            elif event.kind in ("alias", "take"):
                sid = self.owner(phase, event.other)
                if sid is None:  # nothing known to share: costs nothing
                    continue
                self.bind(phase, event.name, sid)
                if event.kind == "take":
                    self.free(phase, event.other)
            elif event.kind == "free":
                if event.name not in pooled:
                    self.free(phase, event.name)
            elif event.kind == "workspace":
                self.timeline.append((phase, event.label or event.name, self.live + event.size))

    def estimate(self) -> PeakEstimate:
        return PeakEstimate.of(self.timeline, model="inductor")

    def copy(self) -> _Storages:
        copied = _Storages()
        copied.names, copied.refs, copied.size = dict(self.names), list(self.refs), list(self.size)
        copied.kept, copied.live, copied.timeline = set(self.kept), self.live, list(self.timeline)
        return copied


def _copy(graph: fx.GraphModule) -> fx.GraphModule:
    copy = fx.Graph()
    copy.output(copy.graph_copy(graph.graph, {}))
    return ti.lazy_graph_module(graph, copy)


def _unread_results_bytes(kernel: object, allocated: set[str]) -> int:
    """Bytes of a multi-output fallback's tensor results that no buffer reads (Inductor
    dropped their ``MultiOutput``): a dropout's mask when only its output is needed, its
    output when a backward replays it for the mask."""
    found, stack = 0, [getattr(kernel, "outputs", None) or ()]
    while stack:
        value = stack.pop()
        if isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, ir.MultiOutput) and value.get_name() not in allocated:
            layout = value.get_layout()
            found += ti.inductor_size_hint(layout.storage_size()) * layout.dtype.itemsize
    return found


def _viewed_input(kernel: object) -> str | None:
    """The storage a fallback kernel's results view, where its op returns views of its
    first input (the schema's return aliases it), else None."""
    inputs = getattr(kernel, "inputs", None)
    if not inputs or not ti.returns_an_alias(getattr(kernel, "op_overload", None)):
        return None
    return _storage_name(inputs[0])


def _storage_name(node: object) -> str | None:
    """The buffer (or graph input) holding an IR value, through boxes and views."""
    while not isinstance(node, ir.Buffer) and hasattr(node, "data"):
        node = node.data
    return node.get_name() if isinstance(node, ir.Buffer) else None


def _strides(node: object) -> tuple[sympy.Expr, ...] | None:
    """An output's strides as Inductor laid it out, as expressions: at the hints they would
    say a dynamic-shape output of another layout than its symbolic strides."""
    try:
        return tuple(sympy.sympify(s) for s in node.get_layout().stride)  # type: ignore[attr-defined]
    except (AttributeError, NotImplementedError, TypeError):
        return None


def _same_strides(actual: Sequence[object], wanted: Sequence[sympy.Expr]) -> bool:
    """Equal as expressions; comparing SymInts would evaluate them at their trace-time
    hints (no guard either way: a prediction must not add one)."""

    def expr(value: object) -> sympy.Expr:
        return value.node.expr if isinstance(value, torch.SymInt) else sympy.sympify(value)

    return len(actual) == len(wanted) and all(
        sympy.expand(expr(a) - w) == 0 for a, w in zip(actual, wanted, strict=True)
    )


def _reuse_key(node: object) -> object:
    """``buffer_reuse_key``, or None for what the pool never holds (views, tuples)."""
    layout = node.get_output_spec()  # type: ignore[attr-defined]
    if isinstance(layout, _UNPOOLED_LAYOUTS) or node.get_inputs_that_alias_output():  # type: ignore[attr-defined]
        return None
    return ti.buffer_reuse_key(node)


_UNPOOLED_LAYOUTS = (ir.MultiOutputLayout, ir.NoneLayout, ir.NonOwningLayout)


def _label(node: object, order: dict[fx.Node, int]) -> str:
    """The graph node a scheduled kernel computes: its latest origin in graph order."""
    origins = [o for sub in node.get_nodes() for o in sub.node.origins if o in order]  # type: ignore[attr-defined]
    return max(origins, key=order.__getitem__).name if origins else node.get_name()  # type: ignore[attr-defined]


def _workspace(node: object) -> int:
    kernel = node.node  # type: ignore[attr-defined]
    op = getattr(kernel, "op_overload", None)
    replayed = None
    if op in (ti.run_with_rng_state, ti.run_and_save_rng_state):
        replayed = next((a for a in getattr(kernel, "constant_args", ()) if callable(a)), None)
    inputs = [i for i in getattr(kernel, "inputs", ()) or () if hasattr(i, "get_output_spec")]
    tensors = [i for i in inputs if not isinstance(i.get_output_spec(), _UNPOOLED_LAYOUTS)]
    shapes = [
        ([ti.inductor_size_hint(s) for s in i.get_size()], ir.get_dtype_size(i.get_dtype())) for i in tensors
    ]
    device = kernel.get_device()
    device_type = device.type if device is not None else "cpu"
    if op is ti.run_and_save_rng_state:  # the op it runs, with no state among its inputs
        return workspace_bytes(replayed, device_type, shapes)
    return workspace_bytes(op, device_type, shapes, replayed=replayed)


def _aliasing_fallback_output(source: object) -> bool:
    """An output of a fallback kernel that aliases one of its inputs: never written over."""
    op = source.defining_op  # type: ignore[attr-defined]
    return (
        op is not None
        and isinstance(op.node, (ir.FallbackKernel, ir.MultiOutput))
        and len(source.node.get_inputs_that_alias_output()) > 0  # type: ignore[attr-defined]
    )


def _single_index_in_fused_node(scheduler: object, node: object, source: object) -> bool:
    """``decide_inplace_update``'s ``single_index_in_fused_node``: a buffer the fused kernel
    reads at more than one index (a LoRA base output read as [b, s, n] and as [b*s, n], say)
    is not written over, since a later read may see the new values."""
    fused = scheduler.get_fused_node(node)  # type: ignore[attr-defined]
    name = source.get_name()  # type: ignore[attr-defined]
    deps: set[object] = set()
    for user in source.users:  # type: ignore[attr-defined]
        user_node = user.node
        if not hasattr(user_node, "read_writes"):  # the graph's output
            continue
        first = user_node.get_first_name()
        if first not in scheduler.name_to_fused_node or scheduler.get_fused_node(user_node) is not fused:  # type: ignore[attr-defined]
            continue
        deps |= {dep for dep in user_node.read_writes.reads_and_writes() if dep.name == name}
        if len(deps) > 1:
            return False
    return True


def _removable(local: set[str], sources: dict[str, str]) -> set[str]:
    """The kernel-local buffers Inductor removes: those whose in-place group (a buffer and
    what it was written over, transitively) is local throughout."""
    groups: dict[str, set[str]] = {}
    for out, source in sources.items():
        group = groups.get(out, {out}) | groups.get(source, {source})
        for name in group:
            groups[name] = group
    return {name for name in local if groups.get(name, {name}) <= local}
