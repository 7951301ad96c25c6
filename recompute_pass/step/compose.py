"""The step's peak under a choice of plans: the recorded step with each provisional
graph's phases predicted under its chosen plan.

Levels outside the provisional graphs' phases are measured (``recording``); a chosen plan
changes them only by what it holds between its forward and its backward beyond what the
recorded plan held: its saved bytes, and inputs it saves that had died in the recording.
Inside a provisional phase the level is its start plus the chosen plan's own predicted
excursion (``PlanMemory``). So:

    level(event) = recorded level + sum over the calls open at that event of their extra
    peak(phase of call c) = level(start) + excursion of c's plan
    peak(gap) = recorded peak of the gap + sum of the open calls' extra

Tensors crossing graph boundaries are followed too: an input or output the chosen plan
saves, which the recording saw die, is held on; an output only the recorded plan saved,
dead but for that, is let go. An input the recorded plan saved and the chosen plan does
not is counted as still held (whether something else holds it is not known), so the
prediction stays an upper bound there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from recompute_pass.step.recording import Call, Event, EventKind, Phase, PlanMemory, StepRecording


@dataclass(frozen=True)
class StepPeak:
    bytes: int
    event: int  # the event that closes the interval where it is reached
    phase: Phase
    call: int | None  # the call whose phase it is in; None: between graphs (eager code)

    def describe(self, recording: StepRecording) -> str:
        if self.call is None:
            before = recording.events[self.event - 1] if self.event else None
            where = _after(before, recording) if before is not None else "before the first graph"
            return f"{self.phase.value}, outside the compiled graphs ({where})"
        call = recording.calls[self.call]
        run = sum(c.graph == call.graph for c in recording.calls[: self.call])
        runs = recording.multiplicity(call.graph)
        nth = f" (run {run + 1} of {runs})" if runs > 1 else ""
        return f"{self.phase.value} of {recording.graphs[call.graph]}{nth}"


def _after(event: Event, recording: StepRecording) -> str:
    if event.kind is EventKind.END:
        return "after the backward"
    if event.kind is EventKind.STEP_START:
        return "before the first graph"
    graph = recording.graphs[recording.calls[event.call].graph]
    return f"after the {event.kind.value.replace(' start', '').replace(' end', '')} of {graph}"


def compose(recording: StepRecording, plans: Sequence[PlanMemory | None]) -> StepPeak:
    """The step's peak with ``plans[g]`` for each provisional graph ``g`` (None: a graph
    whose calls are all final).

    In the interval between two events the calls open are those opened before it; an
    input counts as dead in a gap once the recording saw it dead at the gap's end (an
    upper bound: it may have died within), and at a phase's start as of that start."""
    events, calls = recording.events, recording.calls
    opened: list[int] = []  # provisional calls between their forward's end and backward's end
    grown = 0  # gradients a step from ``.grad`` None allocates, which the recorded one added in place
    best = StepPeak(0, 0, Phase.FORWARD, None)
    phase = Phase.FORWARD
    for index, event in enumerate(events):
        previous = events[index - 1] if index else None
        own = _own_phase(previous, event, calls)
        if own is not None:  # a provisional phase: its start plus the plan's excursion
            assert previous is not None
            plan = plans[calls[own].graph]
            assert plan is not None
            call = calls[own]
            if event.kind is EventKind.FORWARD_END:
                rise = plan.forward_peak
            else:
                rise = plan.backward_peak + call.made_gradients
            start = previous.level + grown + _shift(opened, previous.dead, plans, recording)
            peak = StepPeak(start + rise, index, phase, own)
        else:
            shift = grown + _shift(opened, event.dead, plans, recording)
            peak = StepPeak(event.peak_before + shift, index, phase, None)
        if peak.bytes > best.bytes:
            best = peak
        if event.kind is EventKind.FORWARD_END and calls[event.call].provisional:
            opened.append(event.call)
        elif event.kind is EventKind.BACKWARD_START:
            phase = Phase.BACKWARD
        elif event.kind is EventKind.BACKWARD_END:
            grown += calls[event.call].accumulated
            if event.call in opened:
                opened.remove(event.call)
    return best


def _shift(
    opened: Sequence[int], dead: frozenset[int], plans: Sequence[PlanMemory | None], recording: StepRecording
) -> int:
    calls = recording.calls
    return sum(_extra(calls[c], plans[calls[c].graph], dead, recording) for c in opened)


def _own_phase(previous: Event | None, event: Event, calls: Sequence[Call]) -> int | None:
    """The provisional call whose forward or backward the interval ``(previous, event]`` is."""
    if previous is None or previous.call != event.call or not calls[event.call].provisional:
        return None
    pairs = {
        (EventKind.FORWARD_START, EventKind.FORWARD_END),
        (EventKind.BACKWARD_START, EventKind.BACKWARD_END),
    }
    return event.call if (previous.kind, event.kind) in pairs else None


def _extra(call: Call, plan: PlanMemory | None, dead: frozenset[int], recording: StepRecording) -> int:
    """What ``plan`` holds at ``event`` beyond what the recorded plan held: its saved bytes'
    difference; the inputs and outputs it saves (the recorded plan did not) once the
    recording saw them die; less the outputs the recorded plan alone saved, once dead
    but for that (an output saved by its own graph does not keep its Python object
    alive, so its death is seen; an input's is not, and nothing is credited for it)."""
    recorded = call.recorded
    assert plan is not None and recorded is not None
    boundaries = recording.boundaries

    def dead_bytes(positions: frozenset[int], tensors: tuple[int | None, ...]) -> int:
        found = (tensors[k] for k in positions if k < len(tensors))
        return sum(boundaries[t] for t in found if t is not None and t in dead)

    added = plan.held - recorded.held
    added += dead_bytes(plan.saved_inputs - recorded.saved_inputs, call.inputs)
    if len(call.outputs) == plan.outputs == recorded.outputs:  # else its outputs are not the user's alone
        added += dead_bytes(plan.saved_outputs - recorded.saved_outputs, call.outputs)
        added -= dead_bytes(recorded.saved_outputs - plan.saved_outputs, call.outputs)
    return added
