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

Tensors crossing graph boundaries are followed too. The recording notes a boundary tensor
dead once nothing holds it but the provisional plans' saved tensors (``recorder``): an
input or output the chosen plan saves is then held on; one only the recorded plans saved
is let go, unless an open call's chosen plan (or a final call, whose saves are not known
here) may save it still. A tensor counts as held on once it died anywhere in an interval,
and as let go only once it was dead at the interval's start: an upper bound either way.
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
    whose calls are all final)."""
    events, calls = recording.events, recording.calls
    opened: list[int] = []  # calls between their forward's end and their backward's end
    grown = 0  # gradients a step from ``.grad`` None allocates, which the recorded one added in place
    best = StepPeak(0, 0, Phase.FORWARD, None)
    phase = Phase.FORWARD
    for index, event in enumerate(events):
        previous = events[index - 1] if index else None
        since = previous.dead if previous is not None else frozenset()
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
            start = previous.level + grown + _shift(opened, since, since, plans, recording)
            peak = StepPeak(start + rise, index, phase, own)
        else:
            shift = grown + _shift(opened, event.dead, since, plans, recording)
            peak = StepPeak(event.peak_before + shift, index, phase, None)
        if peak.bytes > best.bytes:
            best = peak
        if event.kind is EventKind.FORWARD_END and calls[event.call].has_backward:
            opened.append(event.call)
        elif event.kind is EventKind.BACKWARD_START:
            phase = Phase.BACKWARD
        elif event.kind is EventKind.BACKWARD_END:
            grown += calls[event.call].accumulated
            if event.call in opened:
                opened.remove(event.call)
    return best


def _shift(
    opened: Sequence[int],
    dead: frozenset[int],
    since: frozenset[int],
    plans: Sequence[PlanMemory | None],
    recording: StepRecording,
) -> int:
    """What the open calls' chosen plans hold beyond what the recorded plans held: their
    saved bytes' difference, the boundary tensors they alone save once dead, less those
    only the recorded plans saved once dead. ``dead``: dead by the interval's end (what is
    held on counts if it died anywhere in it); ``since``: dead by its start (what is let
    go counts only from there)."""
    calls, boundaries = recording.calls, recording.boundaries
    added = 0
    chosen: set[int] = set()  # boundaries an open call's chosen plan saves
    recorded: set[int] = set()  # boundaries an open call's recorded plan saved
    final: set[int] = set()  # boundaries of open final calls: what they save is measured, not known
    for c in opened:
        call = calls[c]
        plan = plans[call.graph] if call.provisional else None
        if plan is None or call.recorded is None:
            final.update(t for t in (*call.inputs, *call.outputs) if t is not None)
            continue
        added += plan.held - call.recorded.held
        chosen |= _saved(plan, call)
        recorded |= _saved(call.recorded, call)
    added += sum(boundaries[t] for t in chosen - recorded if t in dead)
    return added - sum(boundaries[t] for t in recorded - chosen - final if t in since)


def _saved(plan: PlanMemory, call: Call) -> set[int]:
    """The boundary tensors whose storage ``plan`` saves in ``call`` (its outputs only where
    they are the user's alone: the same count in the call and the plan)."""
    found = {call.inputs[k] for k in plan.saved_inputs if k < len(call.inputs)}
    if len(call.outputs) == plan.outputs:
        found |= {call.outputs[k] for k in plan.saved_outputs if k < len(call.outputs)}
    return {t for t in found if t is not None}


def _own_phase(previous: Event | None, event: Event, calls: Sequence[Call]) -> int | None:
    """The provisional call whose forward or backward the interval ``(previous, event]`` is."""
    if previous is None or previous.call != event.call or not calls[event.call].provisional:
        return None
    pairs = {
        (EventKind.FORWARD_START, EventKind.FORWARD_END),
        (EventKind.BACKWARD_START, EventKind.BACKWARD_END),
    }
    return event.call if (previous.kind, event.kind) in pairs else None
