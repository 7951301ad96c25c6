"""Deep graphs: repeated blocks found in the joint graph (``graph.blocks``), and the peak
under Inductor composed from the lowerings of each distinct piece (``memory.composed``)
against the whole graph's lowering and the allocator."""

from __future__ import annotations

import dataclasses
import functools
import logging
import unittest.mock

import pytest
import torch

from benchmarks.harness.models import model_cases
from recompute_pass import recompute_backend
from recompute_pass.capture import CapturedStep
from recompute_pass.graph import blocks
from recompute_pass.graph.joint_graph import JointGraph
from recompute_pass.graph.plan_sizes import planned_hints
from recompute_pass.memory import composed, inductor_memory
from recompute_pass.memory.liveness import PeakEstimate
from recompute_pass.options import RecomputeOptions
from recompute_pass.partitioner import partition
from recompute_pass.realization import JointScorer
from tests.support.full_size import full_only
from tests.support.harness import (
    assert_same_step,
    autograd_cache_off,
    compiled_step,
    compiled_step_peak,
    run_step,
)
from tests.support.joint_graphs import analyzed, capture_joints

pytest.importorskip("transformers")

from benchmarks.harness import hf_models

LAYERS, SEQ = 4, 128
TOLERANCE = 0.01  # predicted (and the compiled graphs' plan) against measured


def _llama() -> torch.nn.Module:
    torch.manual_seed(0)
    return hf_models.llama(vocab=128, seq=SEQ, dim=64, heads=4, hidden=176, layers=LAYERS)


def _gpt2() -> torch.nn.Module:
    """Dropout off: the captured joint has not been through Inductor's joint passes, which
    turn random ops into the seeded ones Inductor lowers."""
    torch.manual_seed(0)
    model = hf_models.gpt2(vocab=128, seq=SEQ, dim=64, heads=4, layers=LAYERS)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def _opt() -> torch.nn.Module:
    """Learned positions: the backward ends with two embeddings' gradients, the larger
    vocabulary's at the step's peak."""
    torch.manual_seed(0)
    return hf_models.architecture("opt", vocab=2048, dim=64, heads=4, layers=LAYERS)


def _tokens() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    tokens = torch.randint(0, 128, (2, SEQ))
    return tokens, tokens


@functools.cache
def _captured(name: str) -> CapturedStep:
    model = {"llama": _llama, "gpt2": _gpt2, "opt": _opt}[name]()
    (captured,) = capture_joints(model, _tokens())
    return captured


@functools.cache
def _joint(name: str) -> JointGraph:
    return analyzed(_captured(name))


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_blocks_of_a_decoder_are_its_layers(name) -> None:
    found = blocks.find_blocks(_joint(name).module.graph)
    assert found is not None
    assert found.count == LAYERS
    assert found.container.rsplit(".", 1)[-1] in ("layers", "h")
    # The first layer also computes what every layer shares (CSE keeps the first copy:
    # RoPE's unsqueezed cos and sin), so it may differ; the rest are alike.
    assert len(set(found.kinds[1:])) == 1
    assert found.distinct <= 2
    assert found.describe().startswith(f"{LAYERS} x ")


def test_a_graph_without_repeats_has_no_blocks() -> None:
    case = model_cases(layers=1, dim=64, seq=32)["mlp"]
    torch.manual_seed(0)
    (captured,) = capture_joints(case.build(), case.inputs(2))
    graph = analyzed(captured).module
    assert blocks.find_blocks(graph.graph) is None
    assert composed.for_graph(graph) is None


def test_digest_ignores_names_and_sees_shapes() -> None:
    graph = _joint("llama").module.graph
    found = blocks.find_blocks(graph)
    of_node = blocks.labels(graph, found.container)
    first = [n for n in graph.nodes if of_node.get(n) == 1 and "nn_module_stack" in n.meta]
    second = [n for n in graph.nodes if of_node.get(n) == 2 and "nn_module_stack" in n.meta]
    assert {n.name for n in first}.isdisjoint(n.name for n in second)
    assert blocks.digest(first) == blocks.digest(second)
    assert blocks.digest(first) != blocks.digest(first[:-1])


def _partitioned(name: str, budget: float):
    joint = _joint(name)
    options = RecomputeOptions(memory_budget=budget, fallback=False)
    forward, backward, report = partition(
        _captured(name).copy(),
        num_fwd_outputs=joint.num_fwd_outputs,
        static_lifetime_input_indices=[],
        options=options,
        compiler="inductor",
    )
    return forward, backward, report, joint


@pytest.mark.parametrize(
    ("name", "budget"), [("llama", 0.5), ("llama", 0.0), ("gpt2", 1.0), ("gpt2", 0.5), ("opt", 0.0)]
)
def test_composed_peak_equals_the_whole_graph_lowering(name, budget) -> None:
    """To the byte. Values Inductor computes in each reader (``composed._inlined_values``)
    were buffers between pieces before: Llama's rotary tables at 0 (+3.0%) and GPT-2's
    causal mask in its per-block segment plans at 0.5 (+3.3%). OPT's blocks read the saved
    residual through a view, once donated to the piece that read it last (the next residual
    took its buffer), and its two embeddings' gradients compute the first block's input
    gradient inside their kernels (``composed._runs``, ``tail_joined``)."""
    forward, backward, report, joint = _partitioned(name, budget)
    assert any("peaks composed" in note for note in report.notes), report.notes
    planner = composed.for_graph(joint.module)
    assert planner is not None
    hints = planned_hints(forward.graph, {})
    users = joint.num_fwd_outputs
    whole = inductor_memory.predict_peak(forward, backward, num_user_outputs=users, hints=hints)
    pieces = inductor_memory.predict_peak(
        forward, backward, num_user_outputs=users, hints=hints, planner=planner.plan_graph
    )
    assert pieces.peak_bytes == whole.peak_bytes, (pieces.peak_bytes, whole.peak_bytes)
    # What the forward ends holding (the saved bytes), where the peak is not.
    assert _forward_end(pieces) == _forward_end(whole)
    # One lowering per distinct piece: the layers the plan treats alike are lowered once.
    assert len(composed.split(backward, planner.repeated.container)) >= LAYERS
    assert planner.lowered < planner.asked


def _forward_end(estimate: PeakEstimate) -> int:
    return [live for phase, _, live in estimate.timeline if phase == "forward"][-1]


def test_saved_bytes_bound_every_checked_peak_and_spare_checks(monkeypatch) -> None:
    """The peak search skips plans on their saved bytes (``JointScorer.lower_bound``): that needs
    every composed peak at or over its plan's saved bytes, and it must choose what checking
    every plan of the front chooses."""
    seen: list[tuple[int, int]] = []
    exact = JointScorer.exact

    def recording(scorer: JointScorer, plan) -> int:
        seen.append((scorer.lower_bound(plan), exact(scorer, plan)))
        return seen[-1][1]

    monkeypatch.setattr(JointScorer, "exact", recording)
    _, _, bounded, _ = _partitioned("llama", 0.0)
    assert seen and all(bound <= peak for bound, peak in seen), seen
    assert any("ruled out by their floors" in note for note in bounded.notes), bounded.notes
    checks = len(seen)
    monkeypatch.setattr(JointScorer, "lower_bound", lambda scorer, plan, over=None: 0)
    _, _, every, _ = _partitioned("llama", 0.0)
    assert len(seen) - checks > checks
    assert every.plan_digest == bounded.plan_digest
    assert every.predicted_peak_bytes == bounded.predicted_peak_bytes


@pytest.mark.parametrize(
    ("name", "budget"), [("llama", 0.0), pytest.param("gpt2", 0.25, marks=full_only("CI runs the Llama"))]
)
def test_a_bound_from_the_first_pieces_is_under_the_composed_peak(monkeypatch, name, budget) -> None:
    """``JointScorer.lower_bound(plan, over)`` strings a plan's first new backward pieces' plans
    with bounds for the rest (``composed._bound``). With any number of new pieces lowered
    it must be at most the plan's composed peak (which it equals once every piece is),
    and the search must choose what the saved bytes alone choose."""
    seen: list[tuple[int, int, int, int]] = []  # (new pieces lowered, bound, peak, over)
    lower_bound = JointScorer.lower_bound

    def recording(scorer: JointScorer, plan, over=None) -> int:
        if over is not None and scorer.planner is not None and plan not in scorer.realized:
            result, hints = scorer.extract(plan)
            users = scorer.costed.joint.num_fwd_outputs
            bounds = []
            for lowerings in range(4):
                planner = functools.partial(scorer.planner.plan_graph, new_lowerings=lowerings, hints=hints)
                bound = inductor_memory.predict_peak(
                    result.forward, result.backward, num_user_outputs=users, hints=hints, planner=planner
                )
                bounds.append(bound.peak_bytes)
            exact = scorer.realize(plan)[1].peak_bytes
            seen.extend((lowerings, bound, exact, over) for lowerings, bound in enumerate(bounds))
        return lower_bound(scorer, plan, over)

    monkeypatch.setattr(JointScorer, "lower_bound", recording)
    _, _, bounded, _ = _partitioned(name, budget)
    assert seen and all(bound <= exact for _, bound, exact, _ in seen), seen
    assert any(bound < exact for _, bound, exact, _ in seen), seen  # stand-ins were used
    monkeypatch.setattr(JointScorer, "lower_bound", lambda scorer, plan, over=None: lower_bound(scorer, plan))
    _, _, plain, _ = _partitioned(name, budget)
    assert plain.plan_digest == bounded.plan_digest
    assert plain.predicted_peak_bytes == bounded.predicted_peak_bytes


def _audit_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "compiled graphs' memory plan" in r.getMessage()]


def test_compiled_deep_llama_predicted_and_gradients_equal_eager(caplog) -> None:
    """The composed peak is checked on the real compile's lowering, with no lowering of its
    own: the compiled graphs' figure is logged, and the prediction is within 1% of both
    it and the allocator."""
    backend = recompute_backend.with_options(memory_budget=0.5, fallback=False)
    lowerings = []
    plan_graph = inductor_memory.plan_graph
    with (
        caplog.at_level(logging.INFO, logger="recompute_pass"),
        unittest.mock.patch.object(
            composed, "plan_graph", lambda *a, **k: lowerings.append(a[0]) or plan_graph(*a, **k)
        ),
        unittest.mock.patch.object(
            inductor_memory, "plan_graph", side_effect=AssertionError("a whole-graph lowering")
        ),
    ):
        measured, report, step = compiled_step(_llama(), _tokens(), backend, fx_graph_cache=False)
    assert any("peaks composed" in note for note in report.notes), report.notes
    assert abs(report.predicted_peak_bytes / measured - 1) <= TOLERANCE
    assert lowerings, "the peaks were not composed from the pieces"
    (audit,) = {r.args for r in _audit_records(caplog)}  # one partition, however many steps
    predicted, _, compiled = audit
    assert predicted == report.predicted_peak_bytes
    assert abs(compiled / measured - 1) <= TOLERANCE
    assert_same_step(step, run_step(_llama(), _tokens()))


def test_compiled_gemma_composed_peak_equals_the_compiled_graphs_plan(caplog) -> None:
    """To the byte, at budget 0. Gemma's tied head reads its final RMSNorm's output, a
    pointwise value Inductor computes only where the head's gradient meets the embedding's,
    at the end of the backward (``composed._realized_for``): composed without that, the
    peak was 2.5% low."""
    torch.manual_seed(0)
    model = hf_models.architecture("gemma", vocab=512, dim=64, heads=4, layers=LAYERS)
    backend = recompute_backend.with_options(memory_budget=0.0, fallback=False)
    with (
        caplog.at_level(logging.INFO, logger="recompute_pass"),
        autograd_cache_off(fx_graph_cache=False),  # the partitioner runs, Inductor lowers
    ):
        step = run_step(model, _tokens(), backend=backend)
    (audit,) = {r.args for r in _audit_records(caplog)}
    predicted, _, compiled = audit
    assert predicted == compiled
    assert_same_step(step, run_step(model, _tokens()))


def _call(graph: torch.fx.Graph, target, args: tuple, path: str) -> torch.fx.Node:
    """A node of ``graph`` with its value and the module path that places it in a block."""
    created = graph.call_function(target, args)
    created.meta["val"] = target(*[a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args])
    created.meta["nn_module_stack"] = {path: (path, torch.nn.Module)}
    return created


def _tied_sum_graph(dtype: torch.dtype, scaled: str = "") -> torch.fx.GraphModule:
    """The shape of a tied weight's gradient: an ``mm`` at the start (outside the blocks),
    a chain through four blocks, and the sum of the two gradients at the end. ``scaled``:
    the product's first operand a pointwise value of ``a`` (``"alone"``: read by the
    ``mm`` alone; ``"shared"``: by a relu beside it too)."""
    graph = torch.fx.Graph()
    node = functools.partial(_call, graph)
    inputs = []
    for name, shape in (("a", (8, 4)), ("b", (4, 8)), ("c", (8, 8))):
        inputs.append(graph.placeholder(name))
        inputs[-1].meta["val"] = torch.zeros(shape, dtype=dtype if name == "c" else torch.float32)
    a, b, value = inputs
    if scaled:
        a = node(torch.ops.aten.mul.Tensor, (a, a), "L['self'].head")
    shared = [node(torch.ops.aten.relu.default, (a,), "L['self'].head")] if scaled == "shared" else []
    product = node(torch.ops.aten.mm.default, (a, b), "L['self'].head")
    for block in range(4):
        for _ in range(composed.MIN_PIECE_NODES):
            value = node(torch.ops.aten.relu.default, (value,), f"L['self'].layers.{block}")
    graph.output((node(torch.ops.aten.add.Tensor, (product, value), "L['self'].embed"), *shared))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_a_product_inductor_fuses_into_a_later_sum_is_lowered_beside_it() -> None:
    """Inductor's ``addmm`` pattern computes ``add(mm(a, b), c)`` at the add, holding ``a``
    and ``b`` until then (GPT-2's tied head and embedding: the logits' gradient held across
    the whole backward); of equal dtypes only, as the pattern requires."""
    for dtype, beside in ((torch.float32, True), (torch.float64, False)):
        pieces = composed.split(_tied_sum_graph(dtype), "L['self'].layers")
        assert len(pieces) >= 4
        (home,) = [p for p in pieces if torch.ops.aten.add.Tensor in {n.target for n in p.graph.nodes}]
        assert (torch.ops.aten.mm.default in {n.target for n in home.graph.nodes}) is beside
        assert ("a" in home.inputs) is beside


def test_what_only_a_fused_product_reads_is_computed_beside_it() -> None:
    """Inductor realizes a pointwise value an extern kernel alone reads when it lowers that
    kernel, so a product moved to a later sum takes it along, and what it reads stays live
    until there. Read by another kernel too, it is computed where it is."""
    for scaled, beside in (("alone", True), ("shared", False)):
        pieces = composed.split(_tied_sum_graph(torch.float32, scaled), "L['self'].layers")
        (home,) = [p for p in pieces if torch.ops.aten.add.Tensor in {n.target for n in p.graph.nodes}]
        assert torch.ops.aten.mm.default in {n.target for n in home.graph.nodes}
        assert (torch.ops.aten.mul.Tensor in {n.target for n in home.graph.nodes}) is beside
        assert ("a" in home.inputs) is beside


def test_a_block_is_one_piece_whatever_stacks_its_nodes_carry() -> None:
    """Inside a block's span, a node of a shared module (a backward's rotary tables, rebuilt
    there) and a short run CSE left with another block's stack stay in the block's piece:
    cut apart, the first block of a deep backward made two pieces no other block shared."""
    graph = torch.fx.Graph()
    node = functools.partial(_call, graph)
    x, value = graph.placeholder("x"), graph.placeholder("h")
    x.meta["val"], value.meta["val"] = torch.zeros(8, 8), torch.zeros(8, 8)
    mm = torch.ops.aten.mm.default  # not computed in its readers, as a pointwise op would be
    for block in range(4):
        path = f"L['self'].layers.{block}"
        for _ in range(composed.MIN_PIECE_NODES):
            value = node(mm, (value, x), path)
        shared = node(mm, (x, x), "L['self'].rotary")
        value = node(mm, (value, shared), "L['self'].layers.0")
        for _ in range(composed.MIN_PIECE_NODES):
            value = node(mm, (value, x), path)
    graph.output((value,))
    pieces = composed.split(torch.fx.GraphModule(torch.nn.Module(), graph), "L['self'].layers")
    assert len(pieces) == 4
    assert len({piece.digest for piece in pieces}) == 1


def _shared_value_graph(
    reader: torch._ops.OpOverload, *, gather: bool = False
) -> tuple[torch.fx.GraphModule, str]:
    """A value made before four blocks from an input (``x * 2``, as Llama's rotary cos and
    sin; with ``gather``, rows of ``x`` as an embedding), read by ``reader`` in each."""
    graph = torch.fx.Graph()
    node = functools.partial(_call, graph)
    x, value = graph.placeholder("x"), graph.placeholder("h")
    x.meta["val"], value.meta["val"] = torch.zeros(8, 8), torch.zeros(8, 8)
    if gather:
        rows = graph.placeholder("rows")
        rows.meta["val"] = torch.zeros(8, dtype=torch.long)
        shared = node(torch.ops.aten.embedding.default, (x, rows), "L['self'].embed")
    else:
        shared = node(torch.ops.aten.mul.Tensor, (x, 2.0), "L['self'].rotary")
    for block in range(4):
        for _ in range(composed.MIN_PIECE_NODES):
            value = node(torch.ops.aten.relu.default, (value,), f"L['self'].layers.{block}")
        value = node(reader, (value, shared), f"L['self'].layers.{block}")
    graph.output((value,))
    return torch.fx.GraphModule(torch.nn.Module(), graph), shared.name


def test_a_value_inductor_computes_in_each_pointwise_reader_is_copied_into_each_piece() -> None:
    """Read only by pointwise kernels, a light value is never a buffer of the whole graph:
    each piece computes it from its input (Llama's rotary cos and sin were held across the
    backward: +0.78% on 6 layers), and so is an embedding, a gather Inductor lowers to
    pointwise loops (+1.6% on 24). Read by an ``mm``, Inductor realizes the value once."""
    add, mm = torch.ops.aten.add.Tensor, torch.ops.aten.mm.default
    cases = ((add, False, True), (add, True, True), (mm, False, False), (mm, True, False))
    for reader, gather, copied in cases:
        graph, shared = _shared_value_graph(reader, gather=gather)
        pieces = composed.split(graph, "L['self'].layers")
        readers = [p for p in pieces if any(n.target is reader for n in p.graph.nodes)]
        assert len(readers) == 4
        for piece in readers[1:]:
            assert (shared in piece.inputs) is not copied and ("x" in piece.inputs) is copied
        assert (shared in pieces[0].outputs) is not copied


def test_a_composition_far_from_the_compiled_graphs_is_warned(monkeypatch, caplog) -> None:
    """A composed peak more than 1% from the compiled graphs' memory plan: a warning names
    both figures, and the compiled one is what the allocator sees."""
    lowered = composed.PieceLowerings.plan_graph

    def inflated(self, graph, **kwargs):
        extra = inductor_memory.Event("alloc", "stray", 10**9)
        return [
            (config, dataclasses.replace(plan, events=(*plan.events, extra)))
            for config, plan in lowered(self, graph, **kwargs)
        ]

    monkeypatch.setattr(composed.PieceLowerings, "plan_graph", inflated)
    backend = recompute_backend.with_options(memory_budget=0.5, fallback=False)
    with caplog.at_level(logging.WARNING, logger="recompute_pass"):
        measured, report = compiled_step_peak(_llama(), _tokens(), backend, fx_graph_cache=False)
    assert report.predicted_peak_bytes > 10**9
    (warning,) = {r.args for r in _audit_records(caplog) if r.levelno == logging.WARNING}
    predicted, _, compiled = warning
    assert predicted == report.predicted_peak_bytes
    assert abs(compiled / measured - 1) <= TOLERANCE


@pytest.mark.parametrize("name", ["llama", pytest.param("gpt2", marks=full_only("CI runs the Llama"))])
def test_scheduler_variants_sharing_a_lowering_plan_as_separate_lowerings(name) -> None:
    """The backward's config variants differ in the scheduler's config alone, so one
    lowering serves them all: each variant's plan equals its own lowering's."""
    _, backward, _, _ = _partitioned(name, 0.0)
    ours = {
        "reorder_for_peak_memory": False,
        "score_fusion_memory_threshold": inductor_memory.NO_HORIZONTAL_FUSION,
    }
    with torch._inductor.config.patch(reorder_for_peak_memory=True, score_fusion_memory_threshold=10):
        shared = inductor_memory.plan_graph(
            backward, is_backward=True, variants=({}, ours), without_reuse=True
        )
        separate = [
            plan
            for variant in ({}, ours)
            for plan in inductor_memory.plan_graph(
                backward, is_backward=True, variants=(variant,), without_reuse=True
            )
        ]
    assert len(shared) == 4
    assert [config for config, _ in shared] == [config for config, _ in separate]
    assert [plan for _, plan in shared] == [plan for _, plan in separate]
    # The variants are not alike: the test would pass vacuously otherwise.
    assert shared[0][1].events != shared[2][1].events


def _mm_run(graph: torch.fx.Graph, value: torch.fx.Node, x: torch.fx.Node, path: str) -> torch.fx.Node:
    """``MIN_PIECE_NODES`` products in a row: a run of its own (pointwise ops would be
    computed in their readers, ``composed._inlined_values``)."""
    for _ in range(composed.MIN_PIECE_NODES):
        value = _call(graph, torch.ops.aten.mm.default, (value, x), path)
    return value


def _square_inputs(graph: torch.fx.Graph) -> tuple[torch.fx.Node, torch.fx.Node]:
    x, value = graph.placeholder("x"), graph.placeholder("h")
    x.meta["val"], value.meta["val"] = torch.zeros(8, 8), torch.zeros(8, 8)
    return x, value


def test_a_view_is_donated_only_where_its_storage_is_read_last() -> None:
    """Each block hands its output on through a view, and the graph returns every
    block's output but the last (a saved residual, as in OPT's blocks): the view's
    last use is in the block, its storage's is not, so the piece may not donate it
    (donated, the block's own output took the saved one's buffer: -7.4% on a 12-layer
    OPT). The head reads the last output, which nothing reads after: that it may donate."""
    graph = torch.fx.Graph()
    x, value = _square_inputs(graph)
    outputs = []
    for block in range(4):
        path = f"L['self'].layers.{block}"
        outputs.append(_mm_run(graph, value, x, path))
        value = _call(graph, torch.ops.aten.t.default, (outputs[-1],), path)
    _mm_run(graph, value, x, "L['self'].head")
    graph.output(tuple(outputs[:-1]))
    pieces = composed.split(torch.fx.GraphModule(torch.nn.Module(), graph), "L['self'].layers")
    viewed = [(piece, name) for piece in pieces for name in piece.inputs if name.startswith("t")]
    assert len(viewed) == 4  # blocks 1 to 3 and the head read their input so
    for piece, name in viewed:
        assert name in piece.last_used
        assert piece.storages[piece.inputs.index(name)] != name  # an mm's output
        assert (name in piece.storage_last_used) is (piece is pieces[-1])


def test_a_backward_tail_joins_the_last_block_run() -> None:
    """What follows the last block (a backward's embedding gradients) is lowered with that
    block: Inductor may compute the block's last value inside the tail's kernels."""
    graph = torch.fx.Graph()
    x, value = _square_inputs(graph)
    paths = ["L['self'].head", *(f"L['self'].layers.{block}" for block in range(4)), "L['self'].embed"]
    for path in paths:
        value = _mm_run(graph, value, x, path)
    graph.output((value,))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    apart = composed.split(module, "L['self'].layers")
    joined = composed.split(module, "L['self'].layers", tail_joined=True)
    assert len(apart) == len(paths) and len(joined) == len(paths) - 1
    assert [p.digest for p in joined[:-1]] == [p.digest for p in apart[:-2]]
    computed = [[n for n in p.graph.nodes if n.op == "call_function"] for p in (*apart[-2:], joined[-1])]
    assert len(computed[2]) == len(computed[0]) + len(computed[1])
