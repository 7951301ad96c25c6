"""The step's planner: the graphs compiled under a step budget are planned together.

One per process, as a training step is one per process: graphs compiled by different
``torch.compile`` calls (each block of a per-block compile, the pieces of a graph break,
DDP's buckets) run in one step, and only together do they say what the step holds. So
this is the one piece of state the package keeps besides its config: the graphs waiting
for a plan, and the step being recorded.

- A step is recorded (``recorder``) when a graph is waiting, from the step's first
  module call (a hook armed when a backward pass ends) to the end of its backward pass.
  The first step, whose start no hook watched, is recorded from its first graph's call;
  where a plan is to be chosen, the next one is recorded too (``_unlike_later_steps``).
- Then each waiting graph's front of plans is built (``fronts``; graphs equal in
  structure share one), one plan per graph is chosen for the step's budget (``choice``),
  each graph is compiled once under its plan (``graphs``), and the step's report is
  published (``report``).
- A graph compiled later (a recompile, a new shape) waits for the next step that starts
  after it: it runs provisionally until then, and is planned with the others fixed.
- Where a step cannot be recorded (another profiler runs on CPU) the graphs wait a step
  more; after ``MAX_WAITS`` steps each is planned alone, as without a step (one warning).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from recompute_pass import torch_internals as ti
from recompute_pass.partitioner import FixedPlan
from recompute_pass.step.choice import StepChoice, choose
from recompute_pass.step.compose import compose
from recompute_pass.step.fronts import GraphFront, front
from recompute_pass.step.graphs import StepGraph
from recompute_pass.step.recorder import Recorder
from recompute_pass.step.recording import StepRecording
from recompute_pass.step.report import StepReport, build_step_report, publish_step

log = logging.getLogger(__name__)

# Steps a waiting graph runs provisionally, unrecorded (a profiler of the user's was
# running) or recorded unlike the steps to come (it compiled, it accumulated gradients,
# its start went unwatched),
# before it is planned alone or with that recording.
MAX_WAITS = 8
# Calls a recorded step may make before it is taken for one whose backward never comes
# (forward passes without backward: an evaluation under grad mode, an error).
MAX_CALLS = 4096


class StepPlanner:
    def __init__(self) -> None:
        self.waiting: weakref.WeakSet[StepGraph] = weakref.WeakSet()  # not yet in a recorded step
        self.recorder: Recorder | None = None
        self.armed = True  # the next call starts a step
        self.unrecorded = 0  # steps in a row a profiler of the user's kept from recording
        self.unlike = 0  # recorded steps in a row unlike the steps to come
        self.hook: ti.NextModuleCall | None = None  # waits for the next step's start
        self.planning_only = False  # choose and report, compile nothing (``fit_longest``'s probes)
        self.last: tuple[StepRecording, StepChoice, list] | None = None  # the last plan, for inspection

    @property
    def recording(self) -> bool:
        """Whether calls go through the planner: a step is recorded, or one is due."""
        return self.recorder is not None or (self.armed and len(self.waiting) > 0)

    def register(self, graph: StepGraph) -> None:
        self.waiting.add(graph)

    def call(self, graph: StepGraph, args: Sequence[Any]) -> Any:
        if self.recorder is None and self.armed and len(self.waiting) > 0:
            self._start(args, from_step_start=False)
        recorder = self.recorder
        if recorder is not None and len(recorder.calls) >= MAX_CALLS:
            recorder.abort()
            self.recorder = None
            self._give_up(f"no backward came in {MAX_CALLS} calls of the recorded step")
            recorder = None
        if recorder is not None and not recorder.ended:
            recorded = graph.recorded if graph.is_provisional else None
            return recorder.forward(graph, graph.name, args, graph.run(), recorded)
        outputs = graph.run()(*args)
        if graph.is_provisional:
            ti.after_backward(outputs, self._arm)
        return outputs

    def _arm(self) -> None:
        """A backward pass ended: the next step starts at the next module call, which a
        global forward pre-hook catches (removed as it fires), so that the recording starts
        there rather than at the first graph: what runs before it (embeddings, FSDP's
        gathers) is measured, not estimated."""
        self.armed = True
        if len(self.waiting) > 0:
            self.hook = ti.NextModuleCall(self._step_starts)

    def _step_starts(self, args: Any) -> None:
        if self.recorder is None and self.armed and len(self.waiting) > 0:
            self._start(args, from_step_start=True)

    def _unhook(self) -> None:
        if self.hook is not None:
            self.hook.remove()
            self.hook = None

    def _start(self, args: Sequence[Any], *, from_step_start: bool) -> None:
        watched = self.hook is not None  # a hook waited for this step's first module call
        self._unhook()
        device = _device(args)
        self.armed = False
        if not Recorder.can_measure(device):
            if not any(g.is_provisional for g in self.waiting):  # only a report to make: skip it
                self.waiting.clear()
                return
            self.unrecorded += 1
            if self.unrecorded < MAX_WAITS:
                log.info("recompute_pass: a profiler is running; the step is recorded at the next one")
                return
            self._give_up(f"a profiler of yours ran in each of {MAX_WAITS} steps")
            return
        self.unrecorded = 0
        self.recorder = Recorder(device, self._ended)
        self.recorder.unwatched_start = not watched
        if from_step_start:
            self.recorder.begin()

    def _give_up(self, why: str) -> None:
        """The step cannot be recorded: each waiting graph is planned alone."""
        graphs = list(self.waiting)
        self.waiting.clear()
        self.armed = True
        self._alone(graphs, f"it could not be recorded ({why})")

    def _alone(self, graphs: Sequence[StepGraph], why: str) -> None:
        """Where the step cannot be known, each graph is planned alone, with a budget of its
        own, as without a step: the step's report says so, and a cap warns (it then holds
        per graph, not for the step)."""
        for graph in graphs:
            if graph.is_provisional and not self.planning_only:
                graph.finish(None)
            graph.recorded_once = True
        capped = any(g.options.peak_memory_bytes is not None for g in graphs)
        message = "recompute_pass: the step is not known: %s; each graph is planned alone%s"
        cap = ", and the peak cap holds per graph, not for the step" if capped else ""
        (log.warning if capped else log.info)(message, why, cap)
        publish_step(StepReport.unknown([g.name for g in graphs], why))

    @contextlib.contextmanager
    def only_planning(self) -> Iterator[None]:
        """Inside, a planned step chooses and reports, and its graphs stay provisional
        (nothing is compiled): ``fit_longest`` probes sizes so."""
        self.planning_only = True
        try:
            yield
        finally:
            self.planning_only = False

    def reset(self) -> None:
        """Forget the step being recorded and the graphs waiting (``torch.compiler.reset``
        forgets the graphs themselves)."""
        if self.recorder is not None:
            self.recorder.abort()
        self._unhook()
        planning_only = self.planning_only
        self.__init__()  # type: ignore[misc]
        self.planning_only = planning_only

    def _ended(self, recording: StepRecording) -> None:
        recorder, self.recorder = self.recorder, None
        assert recorder is not None
        unlike = _unlike_later_steps(recording)
        if unlike and self.unlike < MAX_WAITS:
            self.unlike += 1
            log.info("recompute_pass: the recorded step %s; recording the next", unlike)
            self._arm()
            return
        self.unlike = 0
        graphs: list[StepGraph] = list(recorder.graphs)  # type: ignore[arg-type]
        start = time.perf_counter()
        report = None
        try:
            report = self._plan(recording, graphs)
        except UnknownStep as unknown:
            self._alone(graphs, str(unknown))
        except Exception as error:
            log.debug("recompute_pass: step planning failure", exc_info=True)
            self._alone(graphs, f"planning it failed ({type(error).__name__}: {error})".splitlines()[0][:300])
        for graph in graphs:
            graph.recorded_once = True
            self.waiting.discard(graph)
        self._arm()
        if report is not None:
            publish_step(report.timed(planning=time.perf_counter() - start))

    def _plan(self, recording: StepRecording, graphs: Sequence[StepGraph]) -> StepReport:
        """One plan per graph for the step (the module docstring)."""
        trained = {c.graph for c in recording.calls if c.differentiated}
        pending = _pending(recording)
        if pending:  # a pipeline schedule's order: forwards whose backward runs in a later pass
            raise UnknownStep(
                f"forwards of {', '.join(pending)} had no backward in the recorded backward pass"
            )
        for index, graph in enumerate(graphs):
            if graph.is_provisional and index not in trained and not self.planning_only:
                graph.finish(None)  # never differentiated in the step: planned alone
        waiting = [g for index, g in enumerate(graphs) if g.is_provisional and index in trained]
        options = _step_options(waiting or graphs)
        ratio = None if options.peak_memory_bytes is not None else options.memory_budget
        fronts: dict[str, GraphFront] = {}

        def front_of(graph: StepGraph) -> GraphFront:
            if graph.key not in fronts:
                current = None if graph.is_provisional else graph.current
                fronts[graph.key] = front(graph.captured().price(options), current)
            return fronts[graph.key]

        for graph in waiting:
            front_of(graph)
        # Graphs compiled at once (a model whose first graph starts from the batch) run
        # their own plans; they are planned again with the others, or where the cap fails.
        compiled = [
            g
            for index, g in enumerate(graphs)
            if not g.is_provisional and index in trained and not g.symbolic
        ]
        replanned: list[StepGraph] = []
        if compiled and not waiting and options.peak_memory_bytes is not None:
            if compose(recording, [None] * len(graphs)).bytes > options.peak_memory_bytes:
                replanned = [g for g in compiled if g.current is not None]
        elif waiting:
            replanned = [g for g in compiled if g.current is not None]
        for graph in list(replanned):
            try:
                found = front_of(graph)
            except ValueError:  # its compiled plan is not one of this trace's: it stays
                log.debug("recompute_pass: %s keeps its plan", graph.name, exc_info=True)
                replanned.remove(graph)
                continue
            assert found.current is not None
            recording = recording.planned_under(graphs.index(graph), found.plans[found.current].memory)
        chosen = [*waiting, *replanned]
        memories = [front_of(g).memories() if g in chosen else None for g in graphs]
        choice = choose(recording, memories, ratio=ratio, cap=options.peak_memory_bytes)
        self.last = (recording, choice, memories)
        compiled: dict[str, StepGraph] = {}
        for index, graph in enumerate(graphs):
            plan_index = choice.choice[index]
            if graph not in chosen or plan_index is None or self.planning_only:
                continue
            found = fronts[graph.key]
            if graph in replanned and plan_index == found.current:
                continue  # its compiled plan stays
            plan = found.plans[plan_index]
            graph.finish(_fixed(found.graph, plan.saved, plan.recomputed, choice), compiled)
        return build_step_report(recording, graphs, fronts, choice, options, chosen)


def _fixed(graph: str, saved: tuple[int, ...], recomputed: tuple[int, ...], choice: StepChoice) -> FixedPlan:
    return FixedPlan(
        graph=graph,
        saved=tuple(saved),
        recomputed=tuple(recomputed),
        budget_bytes=choice.budget,
        min_bytes=choice.lowest,
        max_bytes=choice.fastest,
        note=f"chosen for the step: step peak {choice.peak.bytes:,} B predicted, budget {choice.budget:,} B",
    )


def _unlike_later_steps(recording: StepRecording) -> str:
    """Why the recorded step's memory is not that of the steps to come ("": it is)."""
    if recording.compiles:  # compiling holds real tensors a step without it frees
        return f"compiled {recording.compiles} frames"
    if recording.accumulating:
        return "began with parameter gradients (accumulated), which a step allocates from none"
    # A plan to choose (a provisional graph) is worth a step more: the next one's start is
    # watched. (Its hook would stay set meanwhile, and ``torch.export`` fails with it.)
    provisional = any(c.provisional for c in recording.calls)
    if recording.unwatched_start and provisional and not _pending(recording):
        return "began before its graphs were compiled (what ran before the first one is estimated)"
    return ""


def _pending(recording: StepRecording) -> list[str]:
    """The graphs with forwards whose backward the recorded backward pass did not run."""
    calls = recording.calls
    return sorted({recording.graphs[c.graph] for c in calls if c.has_backward and not c.differentiated})


class UnknownStep(Exception):
    """What was recorded is not one step of this process's graphs (the message says why)."""


def _step_options(graphs: Sequence[StepGraph]) -> Any:
    """The budget the step is planned to: every graph's must agree."""
    budgets = {(g.options.memory_budget, g.options.peak_memory_bytes) for g in graphs}
    if len(budgets) > 1:
        raise UnknownStep(f"its graphs were compiled with different budgets {sorted(budgets, key=str)}")
    return graphs[0].options


def _device(args: Sequence[Any]) -> torch.device:
    devices = [a.device for a in args if isinstance(a, torch.Tensor) and not ti.is_fake_tensor(a)]
    return next((d for d in devices if d.type == "cuda"), devices[0] if devices else torch.device("cpu"))


PLANNER = StepPlanner()
"""The process's step planner."""
# A step still recorded at exit (a forward never followed by its backward) stops its
# profiler before the interpreter tears the profiler down under it.
atexit.register(PLANNER.reset)
