"""A step of several compiled graphs, planned as one (``recompute_pass.step``).

Unit tests of the composition and the choice on recordings written by hand; then HF
Llama's step compiled per block and with a graph break in its layer loop, without codegen
(the Inductor route's tests are marked slow): after the planned step, the next step's
measured peak (outputs held through backward, the project's one definition) is the
predicted one within 1%, a cap holds, peaks do not rise as the budget falls, and
gradients equal eager's.
"""

from __future__ import annotations

import copy
import dataclasses
import weakref
from collections.abc import Callable, Iterator

import pytest
import torch

import recompute_pass
from benchmarks.harness.meters import step_memory
from recompute_pass import capture_reports
from recompute_pass import torch_internals as ti
from recompute_pass.step import PLANNER
from recompute_pass.step.choice import EXHAUSTIVE, choose
from recompute_pass.step.compose import compose
from recompute_pass.step.graphs import StepGraph
from recompute_pass.step.recording import Call, Event, EventKind, PlanMemory, StepRecording

transformers = pytest.importorskip("transformers")

F, FE, B, BE, END = (
    EventKind.FORWARD_START,
    EventKind.FORWARD_END,
    EventKind.BACKWARD_START,
    EventKind.BACKWARD_END,
    EventKind.END,
)


def _chain(calls: int, *, recorded: PlanMemory, gap: int = 0) -> StepRecording:
    """``calls`` runs of one graph in a chain: each forward leaves its output (10 B) and
    what the recorded plan held; an eager gap of ``gap`` B between forward and backward."""
    events, level = [], 0
    for c in range(calls):
        events.append(Event(F, c, level, level))
        level += 10 + recorded.held
        events.append(Event(FE, c, level, level + recorded.forward_peak))
    peak_gap = level + gap
    for c in reversed(range(calls)):
        events.append(Event(B, c, level, peak_gap if c == calls - 1 else level))
        level -= recorded.held
        events.append(Event(BE, c, level, level + recorded.backward_peak))
    events.append(Event(END, -1, level, level))
    return StepRecording(
        graphs=("block",),
        calls=tuple(Call(0, True, (), (), recorded) for _ in range(calls)),
        events=tuple(events),
        boundaries=(),
    )


def test_compose_adds_what_each_open_call_holds_beyond_the_recording() -> None:
    recorded = PlanMemory(cost=0.0, forward_peak=5, held=0, backward_peak=50)
    chosen = PlanMemory(cost=1.0, forward_peak=7, held=100, backward_peak=30)
    recording = _chain(3, recorded=recorded, gap=40)
    # Under the recorded plan: the backward of the last call starts with 30 B held.
    assert compose(recording, [recorded]).bytes == 30 + 50
    # Under the chosen one each call holds 100 B more until its backward: the first
    # backward starts at 30 + 300 and rises 30; the gap peaks at 30 + 40 + 300.
    peak = compose(recording, [chosen])
    assert peak.bytes == 30 + 40 + 300
    assert peak.call is None  # the eager gap between forward and backward


def test_compose_holds_a_saved_input_only_once_the_recording_saw_it_die() -> None:
    recorded = PlanMemory(cost=0.0, forward_peak=0, held=0, backward_peak=0)
    saves_input = PlanMemory(cost=0.0, forward_peak=0, held=0, backward_peak=0, saved_inputs=frozenset({0}))
    alive = Event(B, 0, 10, 10)
    dead = Event(B, 0, 10, 10, dead=frozenset({0}))

    def recording(backward_start: Event) -> StepRecording:
        events = (
            Event(F, 0, 0, 0),
            Event(FE, 0, 10, 10),
            backward_start,
            Event(BE, 0, 0, 10),
            Event(END, -1, 0, 0),
        )
        return StepRecording(("g",), (Call(0, True, (0,), (), recorded),), events, boundaries=(1000,))

    assert compose(recording(alive), [saves_input]).bytes == 10
    assert compose(recording(dead), [saves_input]).bytes == 1010


def test_compose_lets_go_an_input_only_the_recorded_plan_saved_once_it_was_dead() -> None:
    """Two calls read boundary 0 (1000 B), which its caller lets go after the second
    forward. The recorded plans saved it; chosen plans that do not free it from the
    interval after the one it died in, unless another open call's plan still saves it."""
    saves = PlanMemory(cost=0.0, forward_peak=0, held=0, backward_peak=200, saved_inputs=frozenset({0}))
    frees = PlanMemory(cost=0.0, forward_peak=0, held=0, backward_peak=200)
    gone = frozenset({0})

    def recording(gap_peak: int) -> StepRecording:
        events = (
            Event(F, 0, 1000, 1000),
            Event(FE, 0, 1000, 1000),
            Event(F, 1, 1000, 1000),
            Event(FE, 1, 1000, 1000),
            Event(B, 1, 1000, gap_peak, dead=gone),  # it died in this eager gap
            Event(BE, 1, 1000, 1200, dead=gone),
            Event(B, 0, 1000, 1000, dead=gone),
            Event(BE, 0, 0, 1200, dead=gone),
            Event(END, -1, 0, 0, dead=gone),
        )
        calls = (Call(0, True, (0,), (), saves), Call(1, True, (0,), (), saves))
        return StepRecording(("g", "h"), calls, events, boundaries=(1000,))

    assert compose(recording(1500), [saves, saves]).bytes == 1500
    assert compose(recording(1500), [frees, frees]).bytes == 1500  # not let go in the gap it died in
    assert compose(recording(1000), [saves, saves]).bytes == 1200  # each backward: 1000 + 200
    assert compose(recording(1000), [frees, frees]).bytes == 1000  # each backward: 0 + 200
    assert compose(recording(1000), [saves, frees]).bytes == 1200  # call 0 still saves it
    # Call 0 final (compiled already, measured as it ran): it may save boundary 0, so call 1
    # cannot let it go; and being measured, it adds nothing when it dies.
    calls = (Call(0, False, (0,), ()), Call(1, True, (0,), (), saves))
    assert compose(dataclasses.replace(recording(1000), calls=calls), [None, frees]).bytes == 1200
    calls = (Call(0, False, (0,), ()), Call(1, True, (), (), frees))
    assert compose(dataclasses.replace(recording(1000), calls=calls), [None, frees]).bytes == 1200


def test_a_tensor_held_only_by_a_compiled_graphs_saves_is_told_from_one_held_elsewhere() -> None:
    """A compiled graph's saved tensor keeps its Python object alive, so a weak reference
    cannot say the caller let it go; its reference counts can (``ti.held_only_by``)."""
    weight = torch.randn(8, 8, requires_grad=True)
    scaled = torch.compile(lambda x: (x * weight).sin(), backend="aot_eager")  # saves x
    kept: list[torch.Tensor] = []
    for holder, alone in (
        (lambda t: None, True),
        (lambda t: kept.append(t), False),  # Python holds it
        (lambda t: kept.append(t.sin()), False),  # an eager node saved it
        (lambda t: kept.append(t[1:]), False),  # a view of it lives
    ):
        tensor = torch.randn(8, 8, requires_grad=True) * 2
        before = ti.implementation_uses(tensor)
        out = scaled(tensor)
        saves = ti.implementation_uses(tensor) - before
        ref = weakref.ref(tensor)
        holder(tensor)
        del tensor
        assert ref() is not None and saves == 1
        assert ti.held_only_by(ref, saves) is alone
        out.sum().backward()
        kept.clear()
    torch.compiler.reset()


def test_choose_spans_the_steps_range_and_never_rises_as_the_budget_falls() -> None:
    recorded = PlanMemory(cost=0.0, forward_peak=0, held=0, backward_peak=0)
    front = [
        PlanMemory(cost=0.0, forward_peak=10, held=300, backward_peak=10),  # fastest
        PlanMemory(cost=1.0, forward_peak=10, held=100, backward_peak=60),
        PlanMemory(cost=3.0, forward_peak=10, held=0, backward_peak=200),  # frugal, rebuilds a lot
    ]
    recording = _chain(4, recorded=recorded)
    peaks = []
    for ratio in (1.0, 0.75, 0.5, 0.25, 0.0):
        choice = choose(recording, [front], ratio=ratio, cap=None)
        assert choice.peak.bytes <= choice.budget
        peaks.append(choice.peak.bytes)
    assert peaks == sorted(peaks, reverse=True)
    assert len(set(peaks)) >= 2  # budgets buy plans between the ends
    low = choose(recording, [front], ratio=0.0, cap=None)
    assert low.peak.bytes == min(compose(recording, [p]).bytes for p in front)
    assert choose(recording, [front], ratio=None, cap=1).notes  # a cap under the lowest: said


def test_many_graphs_are_searched_locally_and_still_fit() -> None:
    recorded = PlanMemory(cost=0.0, forward_peak=0, held=0, backward_peak=0)
    front = [
        PlanMemory(cost=float(k), forward_peak=10, held=100 - 20 * k, backward_peak=20 * k) for k in range(5)
    ]
    graphs = 7  # 5**7 choices: more than EXHAUSTIVE
    assert 5**graphs > EXHAUSTIVE
    events, level = [], 0
    for c in range(graphs):
        events += [Event(F, c, level, level), Event(FE, c, level + 10, level + 10)]
        level += 10
    for c in reversed(range(graphs)):
        events += [Event(B, c, level, level), Event(BE, c, level - 10, level)]
        level -= 10
    events.append(Event(END, -1, 0, 0))
    calls = tuple(Call(c, True, (), (), recorded) for c in range(graphs))
    recording = StepRecording(tuple(f"g{c}" for c in range(graphs)), calls, tuple(events), ())
    top = choose(recording, [front] * graphs, ratio=1.0, cap=None)
    cap = top.fastest - 150
    choice = choose(recording, [front] * graphs, ratio=None, cap=cap)
    assert not choice.exhaustive and choice.notes
    assert choice.peak.bytes <= cap < top.peak.bytes
    assert choice.cost > top.cost


# --- HF Llama, compiled per block and with a graph break ---------------------------------

LAYERS, DIM, SEQ, VOCAB = 4, 64, 64, 256


def _llama(use_cache: bool = False, positions: int = SEQ) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=DIM,
        intermediate_size=176,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=positions,
        use_cache=use_cache,
    )
    return transformers.LlamaForCausalLM(config)


def _compiled(model: torch.nn.Module, route: str, backend: object) -> Callable[..., object]:
    if route == "block":
        for layer in model.model.layers:
            layer.compile(backend=backend)
        return model
    # A graph break in the layer loop: a forward hook Dynamo cannot trace.
    model.model.layers[1].register_forward_hook(lambda module, args, output: torch._dynamo.graph_break())
    return torch.compile(model, backend=backend)


@pytest.fixture(autouse=True)
def _fresh_planner() -> Iterator[None]:
    torch.compiler.reset()
    PLANNER.reset()
    yield
    PLANNER.reset()
    torch.compiler.reset()


def _planned_step(model: torch.nn.Module, route: str, backend: object) -> tuple[object, object]:
    """Steps until the step is planned (a step that compiled frames is recorded again);
    returns the compiled model and the step's report."""
    compiled = _compiled(model, route, backend)
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        with capture_reports() as reports:
            outputs = compiled(input_ids=tokens, labels=tokens)
            outputs.loss.backward()
        del outputs
        model.zero_grad(set_to_none=True)
        if reports.steps:
            (report,) = reports.steps
            return compiled, report
    raise AssertionError("the step was never planned")


def _measured(compiled: Callable[..., object], model: torch.nn.Module) -> tuple[int, dict[str, torch.Tensor]]:
    """The next step's peak, the model's outputs held through backward, and its gradients."""
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    held: dict[str, object] = {}

    def forward() -> torch.Tensor:
        held["outputs"] = compiled(input_ids=tokens, labels=tokens)
        return held["outputs"].loss  # type: ignore[attr-defined]

    memory, _ = step_memory(forward, lambda loss: loss.backward(), torch.device("cpu"))
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return memory.peak_bytes, grads


def _eager_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    model = copy.deepcopy(model)
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    model(input_ids=tokens, labels=tokens).loss.backward()
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def _check_route(
    route: str,
    backend: recompute_pass.RecomputeBackend,
    budgets: tuple[float, ...] = (0.5, 0.0),
    *,
    cap: bool = True,
) -> None:
    """``budgets``, then (``cap``) a cap midway between budget 0's and budget 1's step peaks."""
    reference = _eager_grads(_llama())
    peaks, predicted = {}, {}
    for budget in budgets:
        model = _llama()
        compiled, report = _planned_step(model, route, backend.with_options(memory_budget=budget))
        peaks[budget], grads = _measured(compiled, model)
        predicted[budget] = report.predicted_peak_bytes
        assert report.predicted_peak_bytes <= report.budget_bytes
        assert peaks[budget] == pytest.approx(predicted[budget], rel=0.01), (route, budget, report.to_text())
        for name, grad in reference.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)
        top = report.fastest_bytes  # the fastest choice's step peak, whatever the budget
        PLANNER.reset()
        torch.compiler.reset()
    assert list(peaks.values()) == sorted(peaks.values(), reverse=True)  # budgets fall, so do peaks
    if not cap:
        return
    limit = (peaks[0.0] + top) // 2
    model = _llama()
    compiled, report = _planned_step(model, route, backend.with_options(peak_memory_bytes=limit))
    peak, _ = _measured(compiled, model)
    assert peak <= limit, report.to_text()
    assert peak == pytest.approx(report.predicted_peak_bytes, rel=0.01)


@pytest.mark.parametrize("route", ["block", "break"])
def test_a_step_of_many_graphs_meets_its_budget_without_codegen(route: str) -> None:
    _check_route(route, recompute_pass.recompute_eager_backend)


def test_per_block_with_hfs_kv_cache_reports_what_the_caller_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF's default ``use_cache=True``: each layer's keys and values are returned, and
    held with the outputs through the backward. Each layer is a graph of its own (Dynamo
    guards on its cache index), all identical: one is compiled for each plan chosen, the
    others run its code."""
    compiles: list[object] = []
    compile_graph = StepGraph._compile
    monkeypatch.setattr(StepGraph, "_compile", lambda *a: compiles.append(a[3]) or compile_graph(*a))
    reference = _eager_grads(_llama(use_cache=True))
    model = _llama(use_cache=True)
    compiled, report = _planned_step(
        model, "block", recompute_pass.recompute_eager_backend.with_options(memory_budget=0.0)
    )
    assert 1 <= len(compiles) == len({plan.digest() for plan in compiles}) < LAYERS
    peak, grads = _measured(compiled, model)
    for name, grad in reference.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)
    assert peak == pytest.approx(report.predicted_peak_bytes, rel=0.01)
    (note,) = [n for n in report.notes if "held by the caller" in n]
    assert "keys" in note and "values" in note and "use_cache=False" in note
    assert report.calls == LAYERS and len(report.graphs) == LAYERS  # each layer a graph of its own


def test_fit_longest_plans_each_size_of_a_step_compiled_per_block() -> None:
    """``fit_longest`` on a per-block compile: each probed size is a step planned under the
    cap (nothing compiled for real); the size found fits when run, the next does not."""
    model = _Loss(_llama(positions=1024))
    cap = 2_000_000

    def tokens(n: int) -> tuple[torch.Tensor]:
        return (torch.randint(0, VOCAB, (2, n), generator=torch.Generator().manual_seed(1)),)

    def per_block(wrapped: _Loss, backend: object) -> _Loss:
        for layer in wrapped.model.model.layers:
            layer.compile(backend=backend)
        return wrapped

    backend = recompute_pass.recompute_eager_backend
    fit = recompute_pass.fit_longest(
        model, tokens, cap, low=64, high=1024, multiple_of=64, backend=backend, compile=per_block
    )
    assert 64 <= fit.size < 1024 and fit.plan_sizes == ()
    assert fit.predicted_peak_bytes <= cap
    peaks = {}
    for n in (fit.size, fit.size + 64):
        PLANNER.reset()
        torch.compiler.reset()
        compiled = per_block(model, fit.backend)
        for _ in range(2):  # until planned (a step that compiled is recorded again)
            compiled(*tokens(n)).backward()
            model.zero_grad(set_to_none=True)
        peaks[n], _ = step_memory(
            lambda n=n, compiled=compiled: compiled(*tokens(n)),
            lambda loss: loss.backward(),
            torch.device("cpu"),
        )
        model.zero_grad(set_to_none=True)
    assert peaks[fit.size].peak_bytes == pytest.approx(fit.predicted_peak_bytes, rel=0.01)
    assert peaks[fit.size].peak_bytes <= cap < peaks[fit.size + 64].peak_bytes


class _Loss(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=tokens, labels=tokens).loss


def test_forwards_whose_backward_runs_later_are_not_a_step() -> None:
    """Two forwards, then the first one's backward (a pipeline schedule's order): what was
    recorded is no step, so each graph is planned alone, the report says so, and a cap warns."""
    from benchmarks.harness.meters import warnings_logged

    model = _llama()
    compiled = _compiled(
        model, "block", recompute_pass.recompute_eager_backend.with_options(peak_memory_bytes=10**7)
    )
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    with warnings_logged() as warnings, capture_reports() as reports:
        first = compiled(input_ids=tokens, labels=tokens)
        second = compiled(input_ids=tokens, labels=tokens)
        first.loss.backward()
        second.loss.backward()
    (report,) = reports.steps
    assert not report.known and "had no backward in the recorded backward pass" in report.notes[0]
    assert any("the step is not known" in w and "per graph" in w for w in warnings)
    assert len(reports) == 1 and reports[0].solver != "step"  # the block planned alone


def test_plan_steps_off_plans_each_graph_alone() -> None:
    model = _llama()
    backend = recompute_pass.recompute_eager_backend.with_options(memory_budget=0.0, plan_steps=False)
    compiled = _compiled(model, "block", backend)
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    with capture_reports() as reports:
        compiled(input_ids=tokens, labels=tokens).loss.backward()
    assert not reports.steps and len(reports) == 1 and reports[0].solver == "peak"
    with pytest.raises(ValueError, match="plan_steps"):
        recompute_pass.RecomputeOptions(plan_steps="yes")  # type: ignore[arg-type]


def test_the_step_start_hook_fires_once_and_dynamo_never_traces_it() -> None:
    """The planner's step-start hook (a global forward pre-hook) fires at the next module
    call run eagerly, once; a compile that starts while it is set removes it first, so
    Dynamo never traces it (nor guards on it)."""
    torch.compiler.reset()  # a frame compiled before for another Linear would be reused
    fired: list[object] = []
    x = torch.randn(2, 4)
    ti.NextModuleCall(fired.append)
    outer = torch.nn.Sequential(torch.nn.Linear(4, 4))
    outer(x)
    outer(x)
    assert len(fired) == 1 and fired[0][0] is x  # its args, once
    ti.NextModuleCall(fired.append)
    inner = torch.nn.Linear(4, 4)
    inner.compile(backend="eager")  # in place: the hooks would run inside the compiled frame
    counters = torch._dynamo.utils.counters
    counters.clear()
    inner(x)
    assert len(fired) == 1 and ti.NextModuleCall._active is None
    assert counters["frames"]["ok"] >= 1 and not counters["graph_break"]
