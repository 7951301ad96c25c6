"""What one training step did, at the granularity of its compiled graphs: plain data.

A step runs several compiled graphs (per-block compile, graph breaks, DDP's buckets) with
eager code between them (embeddings, the loss, hooks, FSDP's gathers). The recorder
(``recorder``) watches one step in which every graph waiting for its plan runs a
provisional plan, and writes down, at each boundary of a compiled graph's forward or
backward:

- the level: bytes allocated above the level before the step's forward (measured: the
  profiler's allocation events on CPU, the caching allocator on CUDA);
- the highest level since the previous boundary (the peak of the eager code in between,
  or of the provisional graph's own phase);
- which of the tensors crossing graph boundaries were dead by then.

Everything eager is measured; only the compiled graphs' own memory depends on their plans,
and each plan's is predicted (``PlanMemory``). ``compose`` puts the two together.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass


class Phase(enum.Enum):
    FORWARD = "forward"
    BACKWARD = "backward"


@dataclass(frozen=True)
class PlanMemory:
    """One plan of one graph as the step sees it: bytes above the level at the start of
    the call's forward (or backward), from the graph's own predicted timeline.

    ``held``: what the forward leaves allocated for its backward beyond its outputs (the
    saved activations, generator states); ``forward_peak``: the forward's highest level;
    ``backward_peak``: the backward's highest level above the level when it starts (which
    already holds ``held`` and the incoming gradients); ``saved_inputs`` and
    ``saved_outputs``: the positions of the inputs and outputs whose storage it saves, which
    it keeps alive while the caller may have let them go; ``cost``: estimated overhead of
    one call, seconds (recomputation and saved-tensor traffic)."""

    cost: float
    forward_peak: int
    held: int
    backward_peak: int
    saved_inputs: frozenset[int] = frozenset()
    saved_outputs: frozenset[int] = frozenset()
    outputs: int = 0  # the graph's user outputs (the positions ``saved_outputs`` counts in)
    exact: bool = True


class EventKind(enum.Enum):
    STEP_START = "step start"  # the step's first module call, where known
    FORWARD_START = "forward start"
    FORWARD_END = "forward end"
    BACKWARD_START = "backward start"
    BACKWARD_END = "backward end"
    END = "end"  # the backward pass is over


@dataclass(frozen=True)
class Event:
    kind: EventKind
    call: int  # index into ``StepRecording.calls`` (-1 for STEP_START and END)
    level: int  # bytes above the level before the forward
    peak_before: int  # the highest level since the previous event (this one's included)
    dead: frozenset[int] = frozenset()  # boundary tensors (``StepRecording.boundaries``) freed by now


@dataclass(frozen=True)
class Call:
    """One run of a compiled graph. ``provisional``: it ran the plan the recorder gave it
    (``recorded``), and its phases are predicted under whichever plan is composed;
    otherwise it ran its own final plan, and its phases are measured like eager code."""

    graph: int  # index into ``StepRecording.graphs``
    provisional: bool
    inputs: tuple[int | None, ...]  # per input position, its boundary tensor (None: not tracked)
    outputs: tuple[int | None, ...]  # per output position, likewise
    recorded: PlanMemory | None = None
    has_backward: bool = True  # its outputs need a gradient
    differentiated: bool = True  # its backward ran in the recorded backward pass
    # Bytes of the incoming gradients its backward makes itself: an output that received
    # none (a KV cache) gets zeros from AOTAutograd inside the backward, where a plan's
    # predicted backward counts every gradient as allocated when it starts.
    made_gradients: int = 0
    # Bytes of parameter gradients its backward added into ``.grad`` already there (the
    # recorded step accumulated): a step starting from ``.grad`` None allocates them.
    accumulated: int = 0


@dataclass(frozen=True)
class StepRecording:
    graphs: tuple[str, ...]  # a name per compiled graph, in order of first run
    calls: tuple[Call, ...]  # in the order their forwards ran
    events: tuple[Event, ...]  # in time order, the last one END
    boundaries: tuple[int, ...]  # bytes of each tensor crossing a graph boundary
    prologue_bytes: int = 0  # held before the first graph ran (estimated; in every level)
    device: str = "cpu"
    # Frames Dynamo compiled during the step: compiling holds real tensors (example
    # inputs, the frame's locals) that a step without it frees, so such a step's levels
    # are not the steps' to come.
    compiles: int = 0
    # Whether some parameter had a ``.grad`` when the step began (gradient accumulation):
    # the project's step begins from none, whose allocation such a step does not show.
    accumulating: bool = False
    # Whether its start went unwatched: it began before any graph waited (the first step,
    # whose graphs Dynamo compiled in it), so what ran before its first graph is estimated.
    unwatched_start: bool = False

    def multiplicity(self, graph: int) -> int:
        """How many times the graph ran in the step."""
        return sum(call.graph == graph for call in self.calls)

    def planned_under(self, graph: int, memory: PlanMemory) -> StepRecording:
        """The same step with ``graph``'s calls as if they had run ``memory``'s plan
        provisionally: their phases are then predicted under whichever plan is composed."""
        calls = tuple(
            dataclasses.replace(c, provisional=True, recorded=memory)
            if c.graph == graph and c.differentiated
            else c
            for c in self.calls
        )
        return dataclasses.replace(self, calls=calls)

    def held_through(self) -> dict[tuple[int, int], int]:
        """The outputs of calls still alive when the backward returned (held by the caller
        through it: model outputs kept, a cache): (call, output position) -> bytes."""
        end = self.events[-1].dead
        return {
            (index, position): self.boundaries[tensor]
            for index, call in enumerate(self.calls)
            for position, tensor in enumerate(call.outputs)
            if tensor is not None and tensor not in end
        }
