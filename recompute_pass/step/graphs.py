"""The callable Dynamo runs for one compiled graph whose plan is the step's to choose.

The backend hands Dynamo a ``StepGraph`` instead of the compiled function. Two kinds:

- A graph whose inputs include activations autograd made earlier in the step (a block
  after the embeddings, the graph after a break, a DDP bucket after the first) is one of
  several: it starts **provisional**. It runs through AOTAutograd without codegen under
  the plan that saves fewest bytes (so a step that fits later does not run out of memory
  first), while the step is recorded; when the step's backward ends, the planner chooses
  its plan and it is compiled once, for real, in the compile context Dynamo gave it (as
  AOTAutograd's lazy backward compile does), with its fake inputs.
- A graph that starts from the batch and parameters alone (a model compiled whole, the
  first graph before a break) is compiled at once, as a graph alone is today: most steps
  are one such graph. The step's recording checks it, and the planner recompiles it only
  where the step's budget needs another plan.

The graph's joint graph is kept for the planner: from the provisional compile without
codegen, or captured from Inductor's (``capture``), so that each plan is chosen on the
very graph the final compile partitions.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import fx

from recompute_pass import torch_internals as ti
from recompute_pass.capture import CapturedStep, capture_compiled
from recompute_pass.graph.costing import Costed
from recompute_pass.graph.plan_sizes import planned_hints
from recompute_pass.memory import liveness
from recompute_pass.options import RecomputeOptions
from recompute_pass.partitioner import FixedPlan, RecomputePartitioner, joint_digest, partition
from recompute_pass.plan_sync import graph_digest
from recompute_pass.solver.problem import Plan
from recompute_pass.step.fronts import Boundaries, RunningPlan, plan_memory
from recompute_pass.step.recording import PlanMemory

log = logging.getLogger(__name__)

# The provisional plan: the fewest saved bytes (a min cut, no peak search).
# (Not agreed across ranks: every rank's is the same min cut, and it is not the plan trained.)
PROVISIONAL = dict(
    budget_mode="saved",
    memory_budget=0.0,
    memory_budget_bytes=None,
    peak_memory_bytes=None,
    solver="mincut",
    offload=False,
    sync_plans=False,
)


class StepGraph:
    """One Dynamo graph under a step budget (see the module docstring)."""

    def __init__(
        self,
        gm: fx.GraphModule,
        example_inputs: Sequence[object],
        *,
        options: RecomputeOptions,
        inductor: bool,
        config_patches: dict[str, Any] | None,
        name: str,
        planner: Planner,
    ) -> None:
        self.name = name
        self.planner = planner
        self.recorded_once = False  # in a recorded step since it was compiled
        self.options = options
        self.inductor = inductor
        self.config_patches = config_patches
        self.context = ti.CompileContexts.current()
        self.inputs = ti.fake_inputs(example_inputs)
        self.module = _copy(gm)
        self.key = _key(gm, self.inputs)
        self.joint: CapturedStep | None = None
        self.recorded: PlanMemory | None = None  # the provisional plan's memory
        self.compiled: Callable[..., Any] | None = None
        self.plan: FixedPlan | None = None  # the step's plan, once chosen
        self.current: RunningPlan | None = None  # the plan its compiled graphs run
        (output,) = gm.graph.find_nodes(op="output")
        self.output_names = tuple(getattr(v, "name", "") for v in _flat(output.args[0]))
        self.compile_seconds = 0.0
        # Compiled in Dynamo's compile only, and never again: its compile may add guards.
        self.symbolic = symbolic(gm)
        start = time.perf_counter()
        if follows_autograd(example_inputs) and step_budget(options) and not self.symbolic:
            self.provisional: Callable[..., Any] | None = ti.eager_aot_backend(self._provisional_partition)(
                gm, example_inputs
            )
        else:
            self.provisional = None
            self.compiled = self._compile(gm, list(example_inputs), None)
        self.compile_seconds += time.perf_counter() - start

    def __call__(self, *args: Any) -> Any:
        if self.compiled is not None and self.recorded_once and not self.planner.recording:
            return self.compiled(*args)
        if any(ti.is_fake_tensor(a) for a in args):  # run while tracing (DDPOptimizer): not a step
            return self.run()(*args)
        return self.planner.call(self, args)

    @property
    def is_provisional(self) -> bool:
        return self.compiled is None

    def run(self) -> Callable[..., Any]:
        """What runs a call now: the final graphs, else the provisional ones."""
        compiled = self.compiled or self.provisional
        assert compiled is not None
        return compiled

    def finish(self, plan: FixedPlan | None, compiled: dict[str, StepGraph] | None = None) -> None:
        """Compile for real, under ``plan`` (None: the graph's own choice, as alone).

        ``compiled``: graphs finished in this step by identity (``identity``): a graph
        identical to one of them, under the same plan, runs that one's compiled code
        rather than compiling it again (a per-block compile that Dynamo recompiles for each
        block, for a guard on a constant such as HF's KV-cache layer index)."""
        start = time.perf_counter()
        identity = None if compiled is None else self.identity(plan)
        twin = None if compiled is None or identity is None else compiled.get(identity)
        if twin is not None:
            self.compiled, self.current = twin.compiled, twin.current
        else:
            with self.context.restored():
                self.compiled = self._compile(_copy(self.module), list(self.inputs), plan)
            if compiled is not None and identity is not None:
                compiled[identity] = self
        self.plan = plan
        self.provisional = None
        self.compile_seconds += time.perf_counter() - start

    def identity(self, plan: FixedPlan | None) -> str | None:
        """What makes two graphs' compiled code interchangeable: the same code (constants
        and strings included), the same inputs (shapes, strides, dtypes, devices), the same
        route, config and plan. None where the graph holds values of its own (a constant
        tensor, a submodule), which its code does not show."""
        if any(node.op == "get_attr" for node in self.module.graph.nodes):
            return None
        inputs = _described(self.inputs)
        patches = sorted((self.config_patches or {}).items(), key=lambda item: item[0])
        plan_digest = None if plan is None else plan.digest()
        route = (self.inductor, repr(patches), self.options.cache_key())
        described = (self.module.code, inputs, route, plan_digest)
        return hashlib.sha256(repr(described).encode()).hexdigest()

    def captured(self) -> CapturedStep:
        """The joint graph the final compile will partition: traced as it will be (the same
        route, contexts and fake inputs), so that the plan's names are that graph's."""
        if self.joint is None:
            with self.context.restored(), torch.enable_grad():
                self.joint = capture_compiled(
                    _copy(self.module),
                    list(self.inputs),
                    inductor=self.inductor,
                    config_patches=self.config_patches,
                )
        return self.joint

    def _compile(
        self, gm: fx.GraphModule, inputs: list[object], plan: FixedPlan | None
    ) -> Callable[..., Any]:
        partitioner = StepPartitioner(self, plan)
        with torch.enable_grad(), ti.backward_compiled_with_forward():
            if self.inductor:
                with ti.inductor_config.patch(custom_partitioner_fn=partitioner):
                    return ti.compile_fx(gm, inputs, config_patches=self.config_patches)
            return ti.eager_aot_backend(partitioner)(gm, inputs)

    def _provisional_partition(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        users = kwargs["num_fwd_outputs"]
        static = tuple(kwargs.get("static_lifetime_input_indices") or ())
        options = self.options.replace(**PROVISIONAL)
        try:
            forward, backward, _ = partition(
                gm, num_fwd_outputs=users, static_lifetime_input_indices=static, options=options
            )
        except Exception:
            log.debug("recompute_pass: provisional plan failed; PyTorch's partition used", exc_info=True)
            forward, backward = ti.min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
        self.recorded = provisional_memory(forward, backward, users)
        return forward, backward


class Planner(Protocol):
    """What a graph asks of the step's planner (``planner.StepPlanner``)."""

    recording: bool

    def call(self, graph: StepGraph, args: Sequence[Any]) -> Any: ...


class StepPartitioner(RecomputePartitioner):
    """Our partitioner for a step's graph: the planner's plan where it chose one; tells
    the graph which plan it compiled (``StepGraph.current``)."""

    def __init__(self, graph: StepGraph, plan: FixedPlan | None) -> None:
        super().__init__(graph.options, plan=plan)
        self.graph = graph
        self.chosen = self._keep

    def _keep(self, costed: Costed, plan: Plan) -> None:
        self.graph.current = (joint_digest(costed), tuple(sorted(plan.saved)), tuple(sorted(plan.recomputed)))

    def __deepcopy__(self, memo: dict[int, object]) -> StepPartitioner:
        """Inductor copies its config (this among it) for repro strings; the graph it
        reports to holds the compile's fake inputs, which cannot be copied."""
        return self


def step_budget(options: RecomputeOptions) -> bool:
    """Whether the budget needs the step to choose: a ratio below 1 or a cap. At 1 each
    graph's fastest plan is the step's, whatever the step."""
    return options.peak_memory_bytes is not None or options.memory_budget < 1


def symbolic(gm: fx.GraphModule) -> bool:
    """Whether the graph has symbolic shapes: it is compiled inside Dynamo's compile only,
    where the guards its compile adds are kept (a compile after the step could add guards
    nothing installs)."""
    for node in gm.graph.find_nodes(op="placeholder"):
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, torch.SymInt):
            return True
        if isinstance(value, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in value.shape):
            return True
    return False


def follows_autograd(example_inputs: Sequence[object]) -> bool:
    """Whether some input is an activation autograd made earlier in the step: the graph is
    then one of several, and waits for the step to be recorded."""
    return any(isinstance(x, torch.Tensor) and x.requires_grad and not x.is_leaf for x in example_inputs)


def provisional_memory(forward: fx.GraphModule, backward: fx.GraphModule, users: int) -> PlanMemory:
    """The provisional plan's memory, from its graphs walked as they run (no codegen)."""
    hints = planned_hints(forward.graph, {})
    estimate = liveness.predict_peak(forward, backward, num_user_outputs=users, hints=hints)
    (output,) = forward.graph.find_nodes(op="output")
    values = list(output.args[0])
    inputs = list(forward.graph.find_nodes(op="placeholder"))
    saved = Boundaries.of([v for v in values[users:] if isinstance(v, fx.Node)], inputs, values[:users])
    return plan_memory(estimate, cost=0.0, saved=saved, exact=True)


def _flat(value: object) -> tuple[object, ...]:
    return tuple(value) if isinstance(value, list | tuple) else (value,)


def _copy(gm: fx.GraphModule) -> fx.GraphModule:
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return fx.GraphModule(gm, graph)


def _key(gm: fx.GraphModule, inputs: Sequence[object]) -> str:
    """Graphs equal in structure and inputs have equal joint graphs and fronts."""
    return hashlib.sha256(graph_digest(gm.graph) + repr(_described(inputs)).encode()).hexdigest()


def _described(inputs: Sequence[object]) -> list[object]:
    """The inputs as a graph's code sees them: shape, stride, dtype, device, grad."""
    return [
        (tuple(x.shape), tuple(x.stride()), str(x.dtype), str(x.device), x.requires_grad)
        if isinstance(x, torch.Tensor)
        else repr(x)
        for x in inputs
    ]


def describe(gm: fx.GraphModule, number: int) -> str:
    """A graph's name for reports: the innermost module its nodes share (``layers.3``),
    else the function Dynamo compiled (``forward in modeling_llama.py``: a block compiled
    on its own), and its number in order of compilation."""
    stacks = [list(stack.values()) for node in gm.graph.nodes if (stack := node.meta.get("nn_module_stack"))]
    common = stacks[0] if stacks else []
    for stack in stacks[1:]:
        common = [a for a, b in zip(common, stack, strict=False) if a[0] == b[0]]
    if common:
        path, kind = common[-1]
        name = _readable(path)
        if name == "model":  # the compiled module itself: say what it is
            name = getattr(kind, "__name__", str(kind)).rsplit(".", 1)[-1]
        return f"{name} #{number}"
    frame = next((_frame(n.meta["stack_trace"]) for n in gm.graph.nodes if n.meta.get("stack_trace")), "")
    return f"graph #{number}" + (f" ({frame})" if frame else "")


def _frame(stack_trace: str) -> str:
    """The outermost frame of a node's stack trace, as ``function in file``."""
    for line in stack_trace.splitlines():
        line = line.strip()
        if line.startswith("File ") and ", in " in line:
            path = line.split('"')[1] if '"' in line else ""
            return f"{line.rsplit(', in ', 1)[1]} in {path.rsplit('/', 1)[-1]}"
    return ""


def _readable(path: str) -> str:
    """Dynamo's source path (``L['self'].layers[3]``) as a module path (``layers.3``)."""
    for old, new in (
        ("L['self']", ""),
        ("L['fn']", ""),
        ("._modules['", "."),
        ("']", ""),
        ("['", "."),
        ("[", "."),
        ("]", ""),
    ):
        path = path.replace(old, new)
    return path.strip(".") or "model"
