"""Exact solution of the problem without a budget, as a minimum s-t cut.

Each item becomes two vertices, ``in`` and ``out``. Vertices on the sink side are what
backward has: ``out`` there means the value is available, ``in`` there means it is
recomputed. The edges price the cut:

    source -> in_i    recompute_cost_i          (paid when i is recomputed)
    in_i   -> out_i   save_cost_i + price*size_i (paid when i is saved)
    out_j  -> in_i    infinite, j an input of i  (recomputing i needs j)
    out_i  -> sink    infinite, i needed         (backward needs i)

Forbidden choices are infinite edges. ``price`` (seconds per byte) is the Lagrange
multiplier of the byte budget; ``frontier`` searches over it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import breadth_first_order, maximum_flow

from recompute_pass.solver.problem import Plan, Problem

# scipy's max-flow works on int32 capacities; finite capacities are scaled so that their
# sum stays below _FINITE_TOTAL, and anything at or above _INFINITE can never be cut.
_FINITE_TOTAL = 2**30
_INFINITE = _FINITE_TOTAL + 1
_SOURCE, _SINK = 0, 1


def _in(i: int) -> int:
    return 2 + 2 * i


def _out(i: int) -> int:
    return 3 + 2 * i


@dataclass(frozen=True)
class CutGraph:
    """The cut network of a problem, built once and re-priced per call."""

    rows: np.ndarray
    cols: np.ndarray
    save_edge: np.ndarray  # edge index of in_i -> out_i per item (-1: forbidden)
    recompute_edge: np.ndarray  # edge index of source -> in_i per item (-1: forbidden)
    num_vertices: int

    @staticmethod
    def build(problem: Problem) -> CutGraph:
        rows: list[int] = []
        cols: list[int] = []
        save_edge = np.full(len(problem), -1, dtype=np.int64)
        recompute_edge = np.full(len(problem), -1, dtype=np.int64)
        for i, item in enumerate(problem.items):
            save_edge[i] = len(rows)
            rows.append(_in(i))
            cols.append(_out(i))
            recompute_edge[i] = len(rows)
            rows.append(_SOURCE)
            cols.append(_in(i))
            for j in item.inputs:
                rows.append(_out(j))
                cols.append(_in(i))
        for i in sorted(problem.needed):
            rows.append(_out(i))
            cols.append(_SINK)
        return CutGraph(
            np.asarray(rows, dtype=np.int32),
            np.asarray(cols, dtype=np.int32),
            save_edge,
            recompute_edge,
            2 + 2 * len(problem),
        )

    def solve(self, problem: Problem, price: float = 0.0) -> Plan:
        """The plan minimising ``cost + price * size`` (exact up to capacity rounding)."""
        items = problem.items
        save = np.array([it.save_cost + price * it.size for it in items], dtype=np.float64)
        recompute = np.array([it.recompute_cost for it in items], dtype=np.float64)
        can_save = np.array([it.can_save for it in items], dtype=bool)
        can_recompute = np.array([it.can_recompute for it in items], dtype=bool)
        total = save[can_save].sum() + recompute[can_recompute].sum()
        scale = _FINITE_TOTAL / total if total > 1e-200 else 0.0  # below: all ties
        capacity = np.full(len(self.rows), _INFINITE, dtype=np.int64)
        capacity[self.save_edge[can_save]] = np.floor(save[can_save] * scale)
        capacity[self.recompute_edge[can_recompute]] = np.floor(recompute[can_recompute] * scale)
        n = self.num_vertices
        # Sum duplicates (none expected) and keep int32, which maximum_flow requires.
        graph = csr_array((capacity.astype(np.int32), (self.rows, self.cols)), shape=(n, n))
        graph.sum_duplicates()
        flow = maximum_flow(graph, _SOURCE, _SINK).flow
        sink_side = _reaches_sink(graph, csr_array(flow), n)
        saved = frozenset(i for i in range(len(items)) if sink_side[_out(i)] and not sink_side[_in(i)])
        recomputed = frozenset(i for i in range(len(items)) if sink_side[_in(i)] and sink_side[_out(i)])
        return Plan(saved, recomputed).pruned(problem)


def _reaches_sink(capacity: csr_array, flow: csr_array, n: int) -> np.ndarray:
    """Vertices that can still reach the sink in the residual graph (the minimal sink side).

    The minimal sink side prefers leaving a value on the forward side when that is as
    cheap, so ties never add gratuitous recomputation.
    """
    residual = csr_array(capacity - flow)  # flow is skew-symmetric: reverse edges gain capacity
    residual.eliminate_zeros()
    reached = breadth_first_order(residual.T.tocsr(), _SINK, directed=True, return_predecessors=False)
    seen = np.zeros(n, dtype=bool)
    seen[reached] = True
    return seen
