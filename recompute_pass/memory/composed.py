"""Inductor's memory plan of a deep graph, composed from its blocks' plans.

Lowering a whole graph through Inductor is slow (a 12-layer Llama's forward and backward:
about 45 s per plan on 2 cores), so the peak search could afford to check only the two
ends of the budget range. A deep model repeats one block, and a plan that treats blocks
alike repeats one block-plan, so each graph is cut into pieces at its blocks
(``graph.blocks``: one piece per run of nodes of one block, and the runs outside every
block), each piece is lowered on its own (values from earlier pieces are its inputs,
donated where the piece holds their last use), once per distinct piece (a canonical
digest of its nodes, the strides and donations it is lowered with, and the config), and
the pieces' memory events are strung together, renamed, into one plan of the graph.

Two things Inductor does across a boundary are mirrored: its ``addmm`` pattern (a product
computed at the later sum it feeds, ``_fused_later``) and values computed in each kernel
that reads them, never as a buffer (``_inlined_values``: constructors, light pointwise
values such as rotary tables and causal masks). What is not, and so is kept out of the
backward's composed plans, which the backward is then compiled under: the reuse pool
holding a buffer across a boundary (Inductor decides reuse against its own estimate of the
graph's peak, here a piece's: 8% low on a 4-layer Llama), and the scheduler's passes over
the whole graph, ``reorder_for_peak_memory`` and horizontal fusion (9-12% low on a 12-layer
GPT-2). Other fusion across a boundary and the CPU's grouping of kernels across one are
not mirrored either, so the real compile's own memory plan is read when Inductor compiles
the chosen plan, and a composition more than 1% from it is warned of (``audit``).
"""

from __future__ import annotations

import functools
import hashlib
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

import sympy
import torch
from torch import fx

from cost_model import OpKind, SizeHints, base_name, classify, is_constructor, tensor_bytes
from cost_model.symbolic import numel
from recompute_pass import torch_internals as ti
from recompute_pass.graph import blocks
from recompute_pass.memory.inductor_memory import Event, GraphPlan, keeps_order, plan_graph, planned_configs


@dataclass(frozen=True)
class Piece:
    """A run of one block's nodes as a graph of its own: placeholders ``in0``, ``in1``, ...
    stand for ``inputs`` (the outer graph's names), the output tuple for ``outputs``.
    Described by ``recipe``, and built as a graph only when lowered: most pieces are alike
    ones lowered before, known by ``digest``."""

    recipe: tuple[tuple[fx.Node, bool], ...]  # outer nodes in piece order; True: an input
    root: fx.GraphModule  # what get_attr nodes read
    live_out: tuple[fx.Node, ...]  # what later pieces or the graph's output read
    last_used: frozenset[str]  # inputs whose last use in the outer graph is here
    # Per input, the outer name of the storage it is a view of (its own where it is none),
    # and the inputs whose storage nothing reads after this piece: only those may be
    # donated. A view's own last use is not its storage's (OPT's blocks read the saved
    # residual through a view: donated, the next residual took the saved one's buffer).
    storages: tuple[str, ...]
    storage_last_used: frozenset[str]
    digest: str

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(node.name for node, is_input in self.recipe if is_input)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.live_out)

    @functools.cached_property
    def graph(self) -> fx.Graph:
        graph = fx.Graph()
        env: dict[fx.Node, fx.Node] = {}
        inputs = 0
        for node, is_input in self.recipe:
            if is_input:
                env[node] = graph.placeholder(f"in{inputs}")
                env[node].meta = dict(node.meta)
                inputs += 1
            else:
                env[node] = graph.node_copy(node, env.__getitem__)
        graph.output(tuple(env[node] for node in self.live_out))
        return graph

    def module(self) -> fx.GraphModule:
        """The piece to lower, lazily: its Python code is never needed."""
        return ti.lazy_graph_module(self.root, self.graph)


def split(graph: fx.GraphModule, container: str, *, tail_joined: bool = False) -> list[Piece]:
    """``graph`` cut at its blocks, in graph order (``_runs``); a ``getitem`` joins its
    source, so no piece returns a tuple. ``tail_joined``: the run after the last block
    joins that block's run (a backward's embedding gradients: ``_runs``)."""
    runs = _merged(_runs(graph.graph, container, tail_joined=tail_joined))
    piece_of = {node: index for index, nodes in enumerate(runs) for node in nodes}
    order = {node: position for position, node in enumerate(graph.graph.nodes)}
    for node in [n for nodes in runs for n in nodes]:
        user = _fused_later(node, piece_of)
        if user is None:
            continue
        # Lowered where Inductor will run it, beside its user, with the values Inductor
        # computes only there.
        for moved in [*sorted(_realized_for(node, piece_of), key=order.__getitem__), node]:
            runs[piece_of[moved]].remove(moved)
            target = runs[piece_of[user]]
            target.insert(target.index(user), moved)
            piece_of[moved] = piece_of[user]
    inlined = _inlined_values(graph.graph)
    readers = _readers(graph.graph, piece_of, inlined, len(runs))
    sharing: dict[fx.Node, set[int]] = {}  # storage -> the pieces that read it, by any name
    for node, reading in readers.items():
        sharing.setdefault(_storage(node), set()).update(reading)
    return [
        _piece(graph, nodes, index, readers, sharing, inlined, len(runs)) for index, nodes in enumerate(runs)
    ]


def _storage(node: fx.Node) -> fx.Node:
    """The value whose storage ``node`` shares: through views to their base."""
    while node.target is not operator.getitem and classify(node) is OpKind.VIEW and node.args:
        base = node.args[0]
        if not isinstance(base, fx.Node):
            break
        node = base
    return node


def _runs(graph: fx.Graph, container: str, *, tail_joined: bool = False) -> list[list[fx.Node]]:
    """Runs of one block's nodes, cut where the block changes, and the runs before the
    first block's node and after the last's. Between those, a node of no block joins the
    run it is in (a shared module's value rebuilt in a block's backward: rotary tables),
    and so does a short run of another block between two runs of one (a value CSE merged
    across blocks keeps the first block's stack). Cut apart, they split one block of a
    deep backward in two pieces no other block shares.

    ``tail_joined``: the run after the last block's node joins that block's run. A
    backward ends with the embeddings' gradients, which read the first block's input
    gradient, a pointwise value Inductor may compute inside each of their kernels (OPT's
    two embeddings' scatters), holding what it reads until there; cut apart, it was a
    buffer between two pieces (-7.4% on a 12-layer OPT at budget 0)."""
    of_node = blocks.labels(graph, container)
    nodes = [n for n in graph.nodes if n.op not in ("placeholder", "output")]
    inside = [p for p, n in enumerate(nodes) if of_node.get(n, blocks.OUTSIDE) != blocks.OUTSIDE]
    if not inside:
        return [nodes] if nodes else []
    runs: list[tuple[int, list[fx.Node]]] = [(blocks.OUTSIDE, nodes[: inside[0]])]
    home = dict.fromkeys(runs[0][1], 0)  # node -> its run
    for position, node in enumerate(nodes[inside[0] :], start=inside[0]):
        label = of_node.get(node, blocks.OUTSIDE)
        source = node.args[0] if node.target is operator.getitem else None
        if isinstance(source, fx.Node) and source in home:
            runs[home[source]][1].append(node)  # a tuple's parts stay with it
            home[node] = home[source]
            continue
        if position > inside[-1]:
            label = blocks.OUTSIDE  # past the last block's node
        elif label == blocks.OUTSIDE:
            label = runs[-1][0]
        if label != runs[-1][0]:
            if len(runs) >= 3 and runs[-2][0] == label and len(runs[-1][1]) < MIN_PIECE_NODES:
                _, stray = runs.pop()  # an interruption: back to the run before it
                runs[-1][1].extend(stray)
                home.update(dict.fromkeys(stray, len(runs) - 1))
            else:
                runs.append((label, []))
        runs[-1][1].append(node)
        home[node] = len(runs) - 1
    if tail_joined and len(runs) > 2 and runs[-1][0] == blocks.OUTSIDE:
        _, tail = runs.pop()
        runs[-1][1].extend(tail)
    return [run for _, run in runs if run]


def _readers(
    graph: fx.Graph, piece_of: dict[fx.Node, int], inlined: frozenset[fx.Node], outside: int
) -> dict[fx.Node, set[int]]:
    """The pieces that read each value (``outside``: the graph's output), counting the
    reads of an inlined value's copy in another piece as that piece's."""
    readers: dict[fx.Node, set[int]] = {}

    def read(node: fx.Node, piece: int) -> None:
        seen = readers.setdefault(node, set())
        if piece in seen:
            return
        seen.add(piece)
        if node in inlined and piece != outside and piece_of.get(node) != piece:
            for used in node.all_input_nodes:  # the copy reads them here
                read(used, piece)

    for node in graph.nodes:
        piece = outside if node.op == "output" else piece_of.get(node)
        if piece is not None:
            for used in node.all_input_nodes:
                read(used, piece)
    return readers


def _fused_later(node: fx.Node, piece_of: dict[fx.Node, int]) -> fx.Node | None:
    """The user in a later piece that Inductor fuses ``node`` into, if any: post-grad's
    ``addmm`` pattern rewrites ``add(mm(a, b), c)`` (one user, equal dtypes, ``c``
    expandable to the product) into ``addmm(c, a, b)`` at the add, so ``a`` and ``b`` stay
    live until there. A tied weight's two gradients meet so: the head's at the start of
    the backward, the embedding's at its end, with the logits' gradient held in between."""
    if node.target is not torch.ops.aten.mm.default or len(node.users) != 1:
        return None
    (user,) = node.users
    if user.target is not torch.ops.aten.add.Tensor or piece_of.get(user, -1) <= piece_of[node]:
        return None
    other = next((a for a in user.args if a is not node), None)
    product, val = node.meta.get("val"), getattr(other, "meta", {}).get("val")
    tensors = isinstance(product, torch.Tensor) and isinstance(val, torch.Tensor)
    if not tensors or val.dtype != product.dtype:
        return None
    on_gpu = product.device.type != "cpu"
    if on_gpu and all(ti.is_pointwise_use(u) for u in user.users):
        return None  # on a GPU, Inductor unfuses a bias add its pointwise users take
    try:
        expandable = tuple(torch.broadcast_shapes(val.shape, product.shape)) == tuple(product.shape)
    except RuntimeError:
        expandable = False
    return user if expandable else None


def _realized_for(node: fx.Node, piece_of: dict[fx.Node, int]) -> set[fx.Node]:
    """The views and pointwise values ``node`` (an extern kernel) reads that nothing else
    reads: Inductor keeps them unrealized until ``node`` is lowered, so they are computed
    where it runs, and what they read stays live until there (Gemma's tied head reads the
    final RMSNorm's output, a pointwise product of the last residual and its rsqrt)."""
    chain: set[fx.Node] = {node}
    pending = list(node.all_input_nodes)
    while pending:
        value = pending.pop()
        if value in chain or value not in piece_of or not isinstance(value.target, ti.OpOverload):
            continue
        if not (value.target.is_view or _lowered_pointwise(value)) or not set(value.users) <= chain:
            continue
        chain.add(value)
        pending.extend(value.all_input_nodes)
    return chain - {node}


def _inlined_values(graph: fx.Graph) -> frozenset[fx.Node]:
    """Values Inductor computes inside each kernel that reads them, never as a buffer. A
    later piece copies them in (and reads their inputs) rather than taking them as an
    input, which would be a buffer the whole graph never allocates:

    - constructors, and views of them (a gradient's zeros, an index range);
    - light pointwise values (and embeddings) read only by pointwise kernels
      (``_fused_into_readers``): Llama's rotary cos and sin and GPT-2's causal mask, read
      by every block.

    Not a pointwise value an extern kernel reads: Inductor realizes it once, between the
    first reader and the last, and copied into each piece it would be missed."""
    inlined: set[fx.Node] = set()
    for node in graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, ti.OpOverload):
            continue
        inputs = set(node.all_input_nodes)
        view_of_inlined = node.target.is_view and inputs and inputs <= inlined
        if is_constructor(node) or view_of_inlined or _fused_into_readers(node, inlined):
            inlined.add(node)
    return frozenset(inlined)


# Ops that make Inductor realize a value read more than once on the CPU
# (``StorageBox.should_realize_on_reuse``), rather than recompute it in each reader.
_HEAVY_ON_REUSE = frozenset({"exp", "log", "log10", "log1p", "log2", "sigmoid", "tanh"})


def _fused_into_readers(node: fx.Node, inlined: set[fx.Node]) -> bool:
    """Whether Inductor's whole-graph lowering inlines ``node`` into every reader: a
    pointwise op whose every use is pointwise, with no op it realizes on reuse, reading at
    most ``realize_reads_threshold`` buffers (through the values Inductor computes inside
    it: inlined ones, and pointwise values and views read once)."""
    if not _lowered_pointwise(node) or not node.users:
        return False
    if not all(ti.is_pointwise_use(user) for user in node.users):
        return False
    chain, reads, pending = set(), set(), [node]
    while pending:
        current = pending.pop()
        if current in chain:
            continue
        chain.add(current)
        if base_name(current.target) in _HEAVY_ON_REUSE:
            return False
        for used in current.all_input_nodes:
            if used in inlined or _fused_into_its_user(used):
                pending.append(used)
            elif isinstance(used.meta.get("val"), torch.Tensor):
                reads.add(used)
    return len(reads) <= ti.inductor_config.realize_reads_threshold


def _fused_into_its_user(node: fx.Node) -> bool:
    """A pointwise value or a view read once: Inductor computes it inside its reader, whose
    reads are then its reads (GPT-2's causal mask reads the index buffers behind it)."""
    if len(node.users) != 1 or node.op != "call_function" or not isinstance(node.target, ti.OpOverload):
        return False
    return node.target.is_view or _lowered_pointwise(node)


# Ops Inductor lowers to pointwise loops though ATen does not tag them pointwise: an
# embedding is a gather, computed inside each kernel that reads it (the first block's input,
# rebuilt in a backward that recomputes the first block: +1.6% on a 24-layer Llama).
_POINTWISE_GATHERS = frozenset({torch.ops.aten.embedding.default})


def _lowered_pointwise(node: fx.Node) -> bool:
    target = node.target
    if node.op != "call_function" or not isinstance(target, ti.OpOverload):
        return False
    return torch.Tag.pointwise in target.tags or target in _POINTWISE_GATHERS


# A piece's lowering costs about 0.1 s however small it is: a run of fewer nodes (the
# gradient sums between two blocks' backward, say) joins the run before it.
MIN_PIECE_NODES = 24


def _merged(runs: list[list[fx.Node]]) -> list[list[fx.Node]]:
    merged: list[list[fx.Node]] = []
    for nodes in runs:
        if merged and (len(nodes) < MIN_PIECE_NODES or len(merged[-1]) < MIN_PIECE_NODES):
            merged[-1] = merged[-1] + nodes
        else:
            merged.append(nodes)
    return merged


def _piece(
    root: fx.GraphModule,
    nodes: list[fx.Node],
    index: int,
    readers: dict[fx.Node, set[int]],
    sharing: dict[fx.Node, set[int]],
    inlined: frozenset[fx.Node],
    outside: int,
) -> Piece:
    recipe: list[tuple[fx.Node, bool]] = []
    placed: set[fx.Node] = set()

    def place(node: fx.Node) -> None:
        if node in placed:
            return
        if node in inlined:  # recomputed where read, as Inductor does
            for used in node.all_input_nodes:
                place(used)
        placed.add(node)
        recipe.append((node, node not in inlined))  # else defined outside: an input

    for node in nodes:
        for used in node.all_input_nodes:
            place(used)
        placed.add(node)
        recipe.append((node, False))

    def read_later(node: fx.Node) -> bool:
        pieces = readers.get(node, set())
        return outside in pieces or (node not in inlined and any(p != index for p in pieces))

    live_out = [n for n in nodes if read_later(n)]
    inputs = [node for node, is_input in recipe if is_input]
    storages = [_storage(node) for node in inputs]
    computed = [node for node, is_input in recipe if not is_input]
    position = {node: i for i, node in enumerate(computed)}
    outputs = ",".join(str(position[n]) for n in live_out)
    return Piece(
        recipe=tuple(recipe),
        root=root,
        live_out=tuple(live_out),
        last_used=frozenset(n.name for n in inputs if max(readers[n]) == index),
        storages=tuple(storage.name for storage in storages),
        storage_last_used=frozenset(
            n.name for n, storage in zip(inputs, storages, strict=True) if max(sharing[storage]) == index
        ),
        digest=f"{blocks.digest(computed)}:{hashlib.sha256(outputs.encode()).hexdigest()[:8]}",
    )


# Below this many blocks a whole graph lowers in about the time its distinct pieces do
# (measured at 4 layers: 12.6 s whole, 8.1 s composed), and the zoo's 2-layer graphs keep
# the whole-graph plan, exact to the byte.
MIN_BLOCKS = 4


def for_graph(graph: fx.GraphModule) -> PieceLowerings | None:
    """The composed planner for a graph of at least ``MIN_BLOCKS`` repeated blocks, else
    None. Not under Inductor's layout optimisation: whether convolutions go channels-last
    is decided once per graph, so a piece might decide otherwise."""
    found = blocks.find_blocks(graph.graph)
    if found is None or found.count < MIN_BLOCKS or ti.decide_layout_opt(graph):
        return None
    return PieceLowerings(found)


@dataclass
class PieceLowerings:
    """Each distinct piece's memory plans, lowered once per partitioner call and shared by
    every plan it scores."""

    repeated: blocks.Blocks
    plans: dict[tuple[object, ...], list[tuple[dict[str, object], GraphPlan]]] = field(default_factory=dict)
    asked: int = 0  # pieces asked for
    pieces: dict[int, tuple[fx.GraphModule, list[Piece]]] = field(default_factory=dict)  # split, by graph

    @property
    def lowered(self) -> int:
        """Pieces lowered: one per distinct key."""
        return len(self.plans)

    def plan_graph(
        self,
        graph: fx.GraphModule,
        *,
        is_backward: bool,
        donated: Sequence[int] = (),
        input_strides: dict[str, tuple[sympy.Expr, ...]] | None = None,
        variants: Sequence[dict[str, object]] = ({},),
        without_reuse: bool = False,
        new_lowerings: int | None = None,
        hints: SizeHints | None = None,
    ) -> list[tuple[dict[str, object], GraphPlan]]:
        """``inductor_memory.plan_graph``'s answer, composed from the pieces' plans.

        ``new_lowerings``: at most this many backward pieces not lowered before are lowered,
        the first in order; the others stand in as ``_bound`` at ``hints`` (so do the pieces
        after them that read their outputs, whose strides are then unknown): the answer is a
        bound below the whole plan, at the price of a few lowerings (``JointScorer.lower_bound``)."""
        if is_backward:  # only what composition can see: no pass across the whole graph
            variants = [variant for variant in variants if keeps_order(variant)]
        bounded = new_lowerings is not None and is_backward
        assert not bounded or hints is not None, "a bound sizes its stand-ins at hints"
        allowance = new_lowerings or 0
        configs = [config for variant in variants for config, _ in planned_configs(variant, without_reuse)]
        unknown: set[str] = set()  # outputs of stand-ins: their strides are not known
        placeholders = [n.name for n in graph.graph.find_nodes(op="placeholder")]
        # Backward inputs Inductor may write over; a forward's inputs it never frees.
        freeable = {placeholders[i] for i in donated} if is_backward else set()
        external = set(placeholders) - freeable
        strides: dict[str, tuple[sympy.Expr, ...] | None] = dict(input_strides or {})
        composed: dict[tuple[tuple[str, object], ...], tuple[dict[str, object], list[Event]]] = {}
        held: set[str] = set(placeholders)  # outer names a storage is bound to
        for number, piece in enumerate(self._split(graph, is_backward)):
            given = {f"in{j}": strides.get(name) for j, name in enumerate(piece.inputs)}
            piece_donated = tuple(
                j
                for j, (name, storage) in enumerate(zip(piece.inputs, piece.storages, strict=True))
                if name in piece.storage_last_used and storage not in external
            )
            key = (
                piece.digest,
                piece_donated,
                tuple(str(s) for s in given.values()),
                tuple(tuple(sorted(variant.items())) for variant in variants),
                without_reuse,
            )
            if bounded and (unknown & set(piece.inputs) or (key not in self.plans and allowance <= 0)):
                assert hints is not None
                stand_in = _renamed(_bound(piece, piece_donated, hints), piece, number)
                for config in configs:
                    _, events = composed.setdefault(tuple(sorted(config.items())), (config, []))
                    events.extend(stand_in)
                unknown.update(piece.outputs)
                held.update(piece.outputs)
                continue
            self.asked += not bounded
            if key not in self.plans:
                allowance -= 1
                self.plans[key] = plan_graph(
                    piece.module(),
                    is_backward=True,
                    donated=piece_donated,
                    input_strides={k: v for k, v in given.items() if v is not None},
                    variants=variants,
                    without_reuse=without_reuse,
                )
            for config, plan in self.plans[key]:
                _, events = composed.setdefault(tuple(sorted(config.items())), (config, []))
                events.extend(_renamed(plan, piece, number))
            first = self.plans[key][0][1]
            for name, store, stride in zip(piece.outputs, first.outputs, first.output_strides, strict=True):
                strides[name] = stride
                if store is not None:
                    held.add(name)
        outputs = tuple(_outer_outputs(graph))
        results = []
        for config, events in composed.values():
            if without_reuse and config.get("allow_buffer_reuse", ti.inductor_config.allow_buffer_reuse):
                continue  # the reuse pool holds buffers across pieces, which composition misses
            plan = GraphPlan(
                events=tuple(events),
                inputs=tuple(placeholders),
                outputs=tuple(name if name in held else None for name in outputs),
                output_strides=tuple(strides.get(name) if name else None for name in outputs),
            )
            results.append((config, plan))
        return results

    def _split(self, graph: fx.GraphModule, is_backward: bool) -> list[Piece]:
        """``split``, once per graph: a plan's graphs are composed again when bounded."""
        cached = self.pieces.get(id(graph))
        if cached is None or cached[0] is not graph:
            pieces = split(graph, self.repeated.container, tail_joined=is_backward)
            cached = self.pieces[id(graph)] = (graph, pieces)
        return cached[1]

    def describe(self) -> str:
        return f"{self.repeated.describe()}; {self.lowered} of {self.asked} pieces lowered"


def _bound(piece: Piece, donated: Sequence[int], hints: SizeHints) -> GraphPlan:
    """What any memory plan of ``piece`` holds at least, as a plan: the inputs it frees,
    freed first, then its outputs allocated, and nothing in between. Its end is a subset of
    the real plan's end (an output's storage is counted only where it cannot be an input's
    or another output's, and at its smallest), so strung with the real plans of the other
    pieces it bounds the composed peak from below."""
    inputs = {node: f"in{j}" for j, node in enumerate(n for n, is_input in piece.recipe if is_input)}
    computed = {node for node, is_input in piece.recipe if not is_input}
    events = [Event("free", f"in{j}") for j in donated]
    stores: dict[fx.Node, str] = {}
    outputs: list[str | None] = []
    for index, node in enumerate(piece.live_out):
        base, size = _storage_at_least(node, computed, hints)
        if base in inputs:
            outputs.append(inputs[base])
        elif base in stores:
            outputs.append(stores[base])
        else:
            stores[base] = f"bound{index}"
            events.append(Event("alloc", stores[base], size))
            outputs.append(stores[base])
    return GraphPlan(
        events=tuple(events),
        inputs=tuple(inputs.values()),
        outputs=tuple(outputs),
        output_strides=(None,) * len(outputs),
    )


def _storage_at_least(node: fx.Node, computed: set[fx.Node], hints: SizeHints) -> tuple[fx.Node, int]:
    """The value whose storage may hold ``node`` (through views, and ops Inductor may turn
    into views: ``ti.inductor_noop_inputs``), and the fewest bytes that storage can have:
    0 where Inductor may write it into a ``cat``'s buffer."""
    size = _least_bytes(node, hints)
    while node in computed and node.op == "call_function":
        if any(user.target is torch.ops.aten.cat.default for user in node.users):
            size = 0
        source = _aliased_input(node)
        if source is None:
            break
        node = source
        size = min(size, _least_bytes(node, hints))
    return node, size


def _aliased_input(node: fx.Node) -> fx.Node | None:
    """The input ``node`` may be a view of, if any: a view op's (a part of a view op's
    tuple: a ``split``'s), or the input an op Inductor may drop keeps (``remove_noop_ops``)."""
    target = node.target
    if target is operator.getitem:
        source = node.args[0]
        of_view = isinstance(source, fx.Node) and isinstance(source.target, ti.OpOverload)
        return _first_tensor_arg(source) if of_view and source.target.is_view else None
    if not isinstance(target, ti.OpOverload):
        return None
    if target.is_view or target in _LOWERED_AS_VIEWS:
        return _first_tensor_arg(node)
    kept = ti.inductor_noop_inputs().get(target)
    if kept is None:
        return None
    source = kept(node.args) if callable(kept) else node.args[kept] if len(node.args) > kept else None
    return source if isinstance(source, fx.Node) else None


# Ops Inductor lowers to a view of their input though ATen's schema says they are not one.
_LOWERED_AS_VIEWS = frozenset({torch.ops.aten._unsafe_view.default})


def _first_tensor_arg(node: fx.Node) -> fx.Node | None:
    source = node.args[0] if node.args else None
    return source if isinstance(source, fx.Node) else None


def _least_bytes(node: fx.Node, hints: SizeHints) -> int:
    """The smaller of a value's element span and its element count, in bytes, at ``hints``
    (0 where a size has no hint: an unbacked size could be 0)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return 0
    least = sympy.Min(tensor_bytes(val), numel(val) * val.dtype.itemsize)
    if not least.free_symbols <= hints.values.keys():
        return 0
    return hints.evaluate(least)


def _renamed(plan: GraphPlan, piece: Piece, number: int) -> list[Event]:
    """A piece's events in the outer graph's names: its inputs by the names they came
    under, its own buffers made unique, its outputs handed on under their outer names."""
    inputs = dict(zip(plan.inputs, piece.inputs, strict=True))
    viewed = {store for store in plan.outputs if store in inputs}  # an output views an input

    def outer(name: str) -> str:
        return inputs.get(name) or f"{number}:{name}"

    events = []
    for event in plan.events:
        if (
            event.kind == "free"
            and event.name in inputs
            and (inputs[event.name] not in piece.last_used or event.name in viewed)
        ):
            continue  # a later piece reads it still
        other = outer(event.other) if event.other else ""
        events.append(Event(event.kind, outer(event.name), event.size, other, event.label))
    for name, store in zip(piece.outputs, plan.outputs, strict=True):
        if store is not None:
            events.append(Event("alias", name, other=outer(store)))
    for store in dict.fromkeys(s for s in plan.outputs if s is not None):  # the outer names hold them now
        if store not in inputs:
            events.append(Event("free", outer(store)))
        elif inputs[store] in piece.last_used:
            events.append(Event("free", inputs[store]))
    return events


def _outer_outputs(graph: fx.GraphModule) -> list[str | None]:
    (output,) = graph.graph.find_nodes(op="output")
    values = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    return [v.name if isinstance(v, fx.Node) else None for v in values]
