"""Fixed policy: Chen et al.'s sqrt(N) checkpointing (arXiv:1604.06174), on any graph.

The forward is cut, in graph order, into about sqrt(N) segments of equal activation
bytes (N: the forward values that hold memory). Only values that cross into a later
segment may be saved; everything inside a segment is recomputed from them in backward,
one segment at a time, so memory is about sqrt(N) boundaries plus one segment's values.
"""

from __future__ import annotations

import math

from recompute_pass.solver.frontier import Relaxation
from recompute_pass.solver.problem import Problem
from recompute_pass.solver.strategies.base import Solution
from recompute_pass.solver.strategies.policy import solve_policy


def segments(problem: Problem, count: int | None = None) -> list[int]:
    """Each item's segment among ``count`` (default: sqrt(N)): items are in graph order; a
    new segment starts when the activation bytes so far pass the next multiple of
    total / count."""
    items = problem.items
    sizes = [it.size if it.is_forward and it.can_save else 0 for it in items]
    if count is None:
        count = max(1, round(math.sqrt(sum(size > 0 for size in sizes))))
    total = sum(sizes) or 1
    result, before = [], 0
    for size in sizes:
        result.append(min(count - 1, before * count // total))
        before += size
    return result


def block_segments(problem: Problem, per_block: float, *, head_apart: bool = False) -> list[int] | None:
    """Each item's segment when the forward is cut at its repeated blocks (``Item.block``),
    ``per_block`` segments to a block (0.5: two blocks a segment; 2: each block halved by
    activation bytes); what runs outside the blocks joins the segment before it, but with
    ``head_apart`` what runs after the last block (a language model's head and loss) is a
    segment of its own, as under per-block checkpointing: the last block's output may be
    saved, so backward need not rebuild that block before the loss's backward and hold it
    beside the logits. Backward values are in none (-1): what backward reads inside a
    segment is rebuilt, not saved, as per-block checkpointing does. None for a graph of
    fewer than two blocks.

    Per-block checkpointing saves each block's input and rebuilds one block at a time;
    segments of equal bytes, whatever their count, cut blocks where more values cross
    (measured at 24 layers: their best peak 9% above per-block checkpointing's)."""
    items = problem.items
    order = {
        b: k for k, b in enumerate(sorted({it.block for it in items if it.is_forward and it.block >= 0}))
    }
    if len(order) < 2:
        return None
    totals: dict[int, int] = {}
    for it in items:
        if it.is_forward and it.can_save and it.block >= 0:
            totals[it.block] = totals.get(it.block, 0) + it.size
    last_block_item = max(i for i, it in enumerate(items) if it.is_forward and it.block >= 0)
    before: dict[int, int] = {}
    result, current = [], 0
    for i, it in enumerate(items):
        if it.is_forward and it.block >= 0:
            done = before.get(it.block, 0) / max(1, totals.get(it.block, 0))
            current = math.floor((order[it.block] + min(done, 0.999)) * per_block)
            if it.can_save:
                before[it.block] = before.get(it.block, 0) + it.size
        elif head_apart and it.is_forward and i > last_block_item:
            current = math.floor(len(order) * per_block)  # the head: a segment of its own
        result.append(current if it.is_forward else -1)
    return result


def segment_policy(
    problem: Problem, count: int | None = None, segment: list[int] | None = None, *, blocks: bool = False
) -> tuple[set[int], set[int]]:
    """(may recompute, must not save): everything may be recomputed; of the forward values,
    only those crossing into a later segment may be saved. ``segment``: each item's
    segment (``block_segments``), instead of ``count`` segments of equal bytes. ``blocks``:
    the cut is at repeated blocks; a crossing value the blocks share that is rebuilt
    cheaply from far smaller values is then recomputed from them (``shared_rebuilds``)."""
    segment = segment if segment is not None else segments(problem, count)
    crossing = {j for i, it in enumerate(problem.items) for j in it.inputs if segment[j] < segment[i]}
    if blocks:
        for value, sources in shared_rebuilds(problem, crossing).items():
            crossing = (crossing - {value}) | sources
    forward = {i for i, it in enumerate(problem.items) if it.is_forward}
    return set(range(len(problem))), forward - crossing


# A shared value is recomputed when its sources hold at most this share of its bytes.
SHARED_SOURCE_SHARE = 1 / 8


def shared_rebuilds(problem: Problem, crossing: set[int]) -> dict[int, frozenset[int]]:
    """Each crossing value computed by fusible ops alone from values outside every block
    (or from nothing) that hold at most ``SHARED_SOURCE_SHARE`` of its bytes, and read by a
    kernel that needs it as a buffer (as ``extract.rebuild`` asks): its sources.

    HF's float attention mask under ``torch.compile``, [batch, 1, seq, seq], is such a value,
    built from position indices a thousandth its size and read by every block. Saved, it
    is held throughout backward; recomputed from its saved sources, Inductor's backward
    rebuilds it before each block's attention (``extract.rebuild``)."""
    items = problem.items
    buffer_readers = {j for it in items if not it.fuses for j in it.inputs}
    result: dict[int, frozenset[int]] = {}
    for value in sorted(crossing):
        if not (items[value].fuses and items[value].can_recompute and items[value].size > 0):
            continue
        if value not in buffer_readers:  # computed inside each reader: nothing held to rebuild
            continue
        chain, sources, stack = set(), set(), [value]
        while stack:
            i = stack.pop()
            if i in chain or i in sources:
                continue
            if items[i].fuses and items[i].can_recompute:
                chain.add(i)
                stack.extend(items[i].inputs)
            elif items[i].block < 0 and items[i].is_forward and items[i].can_save:
                sources.add(i)  # shared by the blocks, computed by a kernel of its own
            else:
                break  # a kernel of a block's own: not a cheap rebuild
        else:
            if sum(items[j].size for j in sources) <= SHARED_SOURCE_SHARE * items[value].size:
                result[value] = frozenset(sources)
    return result


class SqrtNStrategy:
    name = "sqrt_n"
    honours_budget = False

    def solve(self, relaxation: Relaxation, budget: float, *, time_limit: float) -> Solution:
        problem = relaxation.problem
        return solve_policy(problem, *segment_policy(problem), self.name)
