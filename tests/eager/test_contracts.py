"""The promises PyTorch's checkpointing APIs make, kept at every global budget.

- ``torch.utils.checkpoint`` regions (plain and SAC): no activation of the region is saved,
  not even a backward-only value derived from one; only the region's inputs are.
- ``torch.autograd.graph.region_activation_memory_budget``: the region's budget replaces
  the global one, with PyTorch's validation (one budget per graph, covering its forward).
- Random draws are replayed from saved generator state: masks cost their state, not their
  bytes, and gradients equal eager's.
- Custom ops whose schema proves them functional may be recomputed; mutating ones never.
- Compiled-autograd backward hooks on a region's output keep PyTorch's rule: saved.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from benchmarks.harness.models import model_cases
from recompute_pass import recompute_eager_backend
from recompute_pass import torch_internals as ti
from recompute_pass.options import RecomputeOptions
from recompute_pass.partitioner import partition
from tests.support.harness import Step, assert_same_step, build, case_inputs, run_step
from tests.support.joint_graphs import capture_joints

PYTORCH = ti.eager_aot_backend(ti.min_cut_rematerialization_partition)


def _only_input_saved(step: Step, input_bytes: int) -> None:
    """The plan holds one activation, a graph input (``primals_<i>``) of ``input_bytes``."""
    (report,) = step.reports
    assert report.fallback is None
    activations = [s for s in report.saved if not s.static]
    assert [s.name.startswith("primals_") for s in activations] == [True]
    assert report.saved_bytes == step.saved_bytes == input_bytes


# --- torch.utils.checkpoint regions ------------------------------------------------------


def _chain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.cos(torch.sin(torch.mm(torch.mm(x, w), w)))


def _sac_policy(ctx: object, op: object, *args: object, **kwargs: object) -> CheckpointPolicy:
    if op is torch.ops.aten.mm.default:
        return CheckpointPolicy.MUST_RECOMPUTE
    return CheckpointPolicy.PREFER_RECOMPUTE


class Checkpointed(nn.Module):
    """The issue's repro: a checkpointed mm-mm-sin-cos chain (SAC when ``selective``)."""

    def __init__(self, selective: bool) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 64) / 8)
        self.selective = selective

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kwargs = {}
        if self.selective:
            kwargs["context_fn"] = functools.partial(create_selective_checkpoint_contexts, _sac_policy)
        return checkpoint(_chain, x, self.w, use_reentrant=False, **kwargs).sum()


def _checkpoint_case(selective: bool) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = Checkpointed(selective)
    return model, (torch.randn(64, 64, requires_grad=True),)


def _assert_region_kept(backend: Callable[..., object], selective: bool) -> None:
    model, inputs = _checkpoint_case(selective)
    ours = run_step(model, inputs, backend=backend)
    assert_same_step(ours, run_step(model, inputs), rtol=1e-4, atol=1e-5)
    _only_input_saved(ours, 64 * 64 * 4)  # the region's input x, nothing it computed
    assert run_step(model, inputs, backend=PYTORCH).saved_bytes == ours.saved_bytes


@pytest.mark.parametrize("budget", [1.0, 0.3, 0.0])
@pytest.mark.parametrize("selective", [False, True], ids=["checkpoint", "sac"])
def test_checkpoint_region_saves_only_its_inputs(selective: bool, budget: float) -> None:
    _assert_region_kept(recompute_eager_backend.with_options(memory_budget=budget, fallback=False), selective)


def test_hooked_region_output_is_never_recomputed() -> None:
    """PyTorch never recomputes a checkpointed region's output that carries a
    (compiled-autograd) backward hook, so that an FSDP2-style hook, which must run before the
    region can be recomputed, does not wait on itself. ``cleanup_recompute_tags`` marks it
    MUST_SAVE; we keep that rule at every budget."""

    class SquaredRegion(Checkpointed):  # backward of the square reads the region's output
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return checkpoint(_chain, x, self.w, use_reentrant=False).square().sum()

    torch.manual_seed(0)
    model, inputs = SquaredRegion(selective=False), (torch.randn(64, 64, requires_grad=True),)
    (captured,) = capture_joints(model, inputs)
    module = captured.copy()
    region_output = next(n for n in module.graph.nodes if n.target is torch.ops.aten.cos.default)
    for hooked in (False, True):
        region_output.meta["has_backward_hook"] = hooked
        *_, report = partition(
            captured.copy() if not hooked else module,
            num_fwd_outputs=captured.num_fwd_outputs,
            static_lifetime_input_indices=captured.static_lifetime_input_indices,
            options=RecomputeOptions(memory_budget=0.0, fallback=False),
        )
        # Hooked, it is never recomputed (saved, or a value backward derives from it is).
        assert ("cos" in [r.name for r in report.recomputed]) is not hooked


# --- region_activation_memory_budget --------------------------------------------------------


class Layers(nn.Module):
    """Three mm+relu layers, each under its own region budget; the loss under the last."""

    def __init__(self, budgets: tuple[float, ...], *, loss_in_region: bool = True) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(32, 32) for _ in budgets)
        self.budgets = budgets
        self.loss_in_region = loss_in_region

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        annotate = torch.compiler.is_compiling()  # the annotation raises in eager mode
        for i, (layer, budget) in enumerate(zip(self.layers, self.budgets, strict=True)):
            region = torch.autograd.graph.region_activation_memory_budget
            with region(budget) if annotate else contextlib.nullcontext():
                x = torch.relu(layer(x))
                if i == len(self.layers) - 1 and self.loss_in_region:
                    x = x.square().sum()
        return x if self.loss_in_region else x.sum()


def _layers_step(model: nn.Module, backend: Callable[..., object]) -> Step:
    torch.manual_seed(1)
    return run_step(model, (torch.randn(8, 32),), backend=backend)


def test_region_budget_zero_saves_no_activation() -> None:
    torch.manual_seed(0)
    model = Layers((0.0, 0.0, 0.0))
    # The global budget says "save everything"; the region's 0.0 wins for this graph.
    ours = _layers_step(model, recompute_eager_backend.with_options(memory_budget=1.0, fallback=False))
    assert_same_step(ours, _layers_step(model, None))
    _only_input_saved(ours, 8 * 32 * 4)  # the input batch alone
    assert _layers_step(model, PYTORCH).saved_bytes == ours.saved_bytes
    (report,) = ours.reports
    assert report.budget_ratio == 0.0 and report.saved_bytes == report.min_bytes


def test_region_budget_one_is_the_unbudgeted_plan() -> None:
    torch.manual_seed(0)
    model = Layers((1.0, 1.0, 1.0))
    ours = _layers_step(model, recompute_eager_backend.with_options(memory_budget=0.0, fallback=False))
    (report,) = ours.reports
    assert report.budget_ratio == 1.0 and report.saved_bytes == report.max_bytes > report.min_bytes


@pytest.mark.parametrize(
    ("budgets", "loss_in_region", "message"),
    [
        ((0.0, 0.5, 0.0), True, "conflicting budgets"),
        ((0.0, 0.0, 0.0), False, "must cover the entire forward"),
    ],
    ids=["conflicting", "partial"],
)
@pytest.mark.parametrize("fallback", [True, False])
def test_region_budget_misuse_raises_like_pytorch(
    budgets: tuple[float, ...], loss_in_region: bool, message: str, fallback: bool
) -> None:
    """Even with ``fallback`` on: a user error is not an internal one to paper over."""
    torch.manual_seed(0)
    model = Layers(budgets, loss_in_region=loss_in_region)
    for backend in (PYTORCH, recompute_eager_backend.with_options(fallback=fallback)):
        with pytest.raises(Exception, match=message):
            _layers_step(model, backend)


# --- random ops: replayed from saved generator state -------------------------------------


@functools.cache
def _gpt_steps() -> dict[float | None, Step]:
    """The zoo's GPT (dropout 0.1) at batch 8: eager and ours at five budgets."""
    case = model_cases()["gpt"]
    model, inputs = build(case), case_inputs(case, batch=8)
    with ti.inductor_config.patch(fallback_random=True):
        steps: dict[float | None, Step] = {None: run_step(model, inputs)}
        for budget in (1.0, 0.75, 0.5, 0.25, 0.0):
            # Saved bytes: budget 0 then holds states, not masks (what the tests pin).
            options = {"memory_budget": budget, "budget_mode": "saved", "fallback": False}
            backend = recompute_eager_backend.with_options(**options)
            steps[budget] = run_step(model, inputs, backend=backend)
    return steps


@pytest.mark.parametrize("budget", [1.0, 0.75, 0.5, 0.25, 0.0])
def test_dropout_replayed_at_every_budget(budget: float) -> None:
    steps = _gpt_steps()
    step = steps[budget]
    assert_same_step(step, steps[None])
    (report,) = step.reports
    assert step.saved_bytes == report.saved_bytes  # autograd holds the planned states, exactly
    replayed = sorted(r.name for r in report.recomputed if r.op == "native_dropout")
    states = sorted(s.name.removesuffix("/rng_state") for s in report.saved if s.op == "rng_state")
    assert replayed == states


def test_dropout_at_budget_zero_holds_states_not_masks() -> None:
    steps = _gpt_steps()
    (low,), (high,) = steps[0.0].reports, steps[1.0].reports
    assert not [s.name for s in low.saved if "native_dropout[" in s.name]  # no mask, no output
    assert len([s for s in low.saved if s.op == "rng_state"]) == 7  # every dropout replayed
    assert low.saved_bytes <= 0.03 * high.saved_bytes


@pytest.mark.parametrize("budget", [1.0, 0.5, 0.0])
def test_inductor_style_draws_replay_bit_identically(budget: float) -> None:
    """Without ``fallback_random`` the decomposed dropout draws with ``aten.rand``: replaying
    it gives exactly what PyTorch's partitioner (which saves the draws) computes."""
    case = model_cases()["gpt_block"]  # masks larger than a generator state: replay pays
    model, inputs = build(case), case_inputs(case)
    backend = recompute_eager_backend.with_options(memory_budget=budget, budget_mode="saved")
    ours = run_step(model, inputs, backend=backend)
    assert_same_step(ours, run_step(model, inputs, backend=PYTORCH), rtol=0.0, atol=0.0)
    if budget == 0.0:
        assert [s.op for s in ours.reports[0].saved].count("rng_state") == 3


def test_unreplayable_draws_are_saved_and_reported(
    fallback_random: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the generator state cannot be replayed, the draw is saved, never recomputed."""
    monkeypatch.setattr(ti, "replayable_rng_state_bytes", lambda node: None)
    case = model_cases()["gpt_block"]
    model, inputs = build(case), case_inputs(case)
    backend = recompute_eager_backend.with_options(memory_budget=0.0, fallback=False)
    ours = run_step(model, inputs, backend=backend)
    assert_same_step(ours, run_step(model, inputs))
    (report,) = ours.reports
    assert not [r for r in report.recomputed if r.op == "native_dropout"]
    assert not [s for s in report.saved if s.op == "rng_state"]
    (note,) = [n for n in report.notes if n.startswith("random, not replayable")]
    assert note.count("native_dropout") == 3


def _node(target: object, *args: object, **kwargs: object) -> torch.fx.Node:
    """A call of ``target`` with fake metadata, as the joint graph has it."""
    graph = torch.fx.Graph()
    with torch._subclasses.FakeTensorMode() as fake:
        placeholder = graph.placeholder("x")
        placeholder.meta["val"] = fake.from_tensor(torch.empty(4, 4))
        node = graph.call_function(target, (placeholder, *args), kwargs)
        node.meta["val"] = target(placeholder.meta["val"], *args, **kwargs)
    return node


def test_which_draws_are_replayable() -> None:
    state = torch.get_rng_state().numel()
    assert ti.replayable_rng_state_bytes(_node(torch.ops.aten.native_dropout.default, 0.1, True)) == state
    assert ti.replayable_rng_state_bytes(_node(torch.ops.aten.bernoulli.default)) == state
    generator = torch.Generator()
    assert ti.replayable_rng_state_bytes(_node(torch.ops.aten.bernoulli.default, generator=generator)) is None


# --- custom ops -----------------------------------------------------------------------------


@torch.library.custom_op("recompute_test::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


@scaled_tanh.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


def _scaled_tanh_setup(ctx: object, inputs: tuple[object, ...], output: torch.Tensor) -> None:
    ctx.scale = inputs[1]  # type: ignore[attr-defined]
    ctx.save_for_backward(output)  # type: ignore[attr-defined]


def _scaled_tanh_backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    (out,) = ctx.saved_tensors  # type: ignore[attr-defined]
    scale = ctx.scale  # type: ignore[attr-defined]
    return grad * (scale - out * out / scale), None


scaled_tanh.register_autograd(_scaled_tanh_backward, setup_context=_scaled_tanh_setup)


@torch.library.custom_op("recompute_test::gate_and_count", mutates_args=("counter",))
def gate_and_count(x: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
    counter.add_(1)
    return torch.sigmoid(x)


@gate_and_count.register_fake
def _(x: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class CustomOpMLP(nn.Module):
    def __init__(self, mutating: bool) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, 256), nn.Linear(256, 64)
        self.mutating = mutating
        self.register_buffer("counter", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        # A mutating op has no autograd formula: it gates a detached copy (backward needs the gate).
        h = h * gate_and_count(h.detach(), self.counter) if self.mutating else scaled_tanh(h, 2.0)
        return self.fc2(h).square().mean()


@pytest.mark.parametrize("mutating", [False, True], ids=["functional", "mutating"])
def test_custom_op_recomputed_only_when_schema_proves_it_pure(mutating: bool) -> None:
    torch.manual_seed(0)
    model = CustomOpMLP(mutating)
    torch.manual_seed(1)
    inputs = (torch.randn(32, 64),)
    backend = recompute_eager_backend.with_options(memory_budget=0.0, budget_mode="saved", fallback=False)
    ours = run_step(model, inputs, backend=backend)
    assert_same_step(ours, run_step(model, inputs))
    (report,) = ours.reports
    recomputed = {r.op for r in report.recomputed}
    if mutating:  # functionalized into a higher-order op: run once, its result saved
        assert not recomputed & {"gate_and_count", "auto_functionalized", "auto_functionalized_v2"}
    else:  # budget 0 then holds the input batch alone
        assert "scaled_tanh" in recomputed
        _only_input_saved(ours, 32 * 64 * 4)
