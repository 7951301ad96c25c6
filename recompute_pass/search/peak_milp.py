"""Exact peak-budgeted plans: min estimated overhead s.t. the joint schedule's walk peak <= cap.

``plan_peak.JointSchedule.peak`` walks one fixed order: forward nodes in graph order (plus
the backward-only values a plan saves, with their backward-only ancestors); then backward,
where every member node at or after the first tangent user (an *anchor*) runs at its graph
position, preceded by the members before it that it still lacks (*pulled*: recomputed
forward values and early backward-only values), in graph order. So a pulled node ``m``
runs in the group of the first present anchor that reaches it through pulled members,
and every node's slot is one of a fixed, totally ordered set of keys: ``(0, ord, ord)``
in forward, ``(1, ord(anchor), ord(m))`` in backward. Nothing but membership depends on
the plan, and membership is linear:

- ``f_n`` (runs in forward), ``p_a`` (an anchor is present: a member on a path to a
  gradient), ``e(m, a)`` (pulled ``m`` has run by anchor ``a``: some present anchor user
  <= a, or a pulled user that has run by ``a``) are each pinned between a max and a sum of
  the same justifications, so they are integral whenever ``saved``/``recomputed`` are;
  only those two are binary. Chains of recomputed values are exact this way: ``e`` of a
  value follows ``e`` of its recomputed users (no ordering variables needed, the order
  within a group being graph order).
- A storage (a node with its views; a multi-output op's result under its getitem's name,
  or the op's while no getitem runs) is live at slot ``t`` iff it was allocated at or before
  ``t`` and some use runs at or after ``t`` (or it is kept past the phase). Each such
  conjunction of 0/1 expressions is a lower bound ``sum - (k - 1)`` on a continuous
  ``alive`` variable, and ``alive`` only enters ``<= cap`` rows: exact, as the rows are.
- Rows at every slot that allocates or holds a workspace, and at the first backward group
  (tangents arrive before it); the others cannot exceed the entry before them.

It includes workspace transients (``NodeFacts.workspace``), replayed draws' generator
state (allocated with the draw, freed when the replay runs), tangents, gradients (kept)
and user outputs (kept; never recomputed here: the walk would then free both copies at
once). :meth:`PeakModel.peak` evaluates the model for a plan; the tests check it equals
``JointSchedule.peak`` on every valid plan of small graphs, and the MILP's optimum the
brute-force one.

Not exact: the walk is the fast estimate, not Inductor's memory plan (``PlanScorer.exact``
still checks the choice); results with nested tuples raise ``Unsupported``; a solve
stopped by its time limit returns its incumbent, valid and within the cap but not proven
optimal (and then, like any time-limited MILP, dependent on the machine's speed).
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array
from torch import fx

from cost_model import tensor_bytes
from recompute_pass.memory.liveness import _is_result, _storages
from recompute_pass.memory.plan_peak import JointSchedule
from recompute_pass.solver.problem import Plan, Problem

log = logging.getLogger(__name__)

_GAP = 1e-6
_STATUS_OPTIMAL = 0
Key = tuple[int, int, int]  # (phase, anchor order, node order): the fixed slot order


class Unsupported(ValueError):
    """The graph has a structure the formulation does not model exactly."""


class _Lin:
    """A linear expression over the model's columns (a builder's scratch value)."""

    __slots__ = ("coefs", "const")

    def __init__(self, const: float = 0.0, coefs: dict[int, float] | None = None) -> None:
        self.const = const
        self.coefs = coefs or {}

    def __add__(self, other: _Lin) -> _Lin:
        coefs = dict(self.coefs)
        for k, v in other.coefs.items():
            coefs[k] = coefs.get(k, 0.0) + v
        return _Lin(self.const + other.const, coefs)

    def __sub__(self, other: _Lin) -> _Lin:
        return self + other.scaled(-1.0)

    def scaled(self, factor: float) -> _Lin:
        return _Lin(self.const * factor, {k: v * factor for k, v in self.coefs.items()})

    def high(self) -> float:
        """The largest value over columns in [0, 1]."""
        return self.const + sum(v for v in self.coefs.values() if v > 0)

    def low(self) -> float:
        return self.const + sum(v for v in self.coefs.values() if v < 0)


_ZERO, _ONE = _Lin(0.0), _Lin(1.0)


def _and(*parts: _Lin) -> _Lin:
    """A lower bound on the conjunction of 0/1 expressions, exact at integers."""
    total = _Lin(1.0 - len(parts))
    for part in parts:
        total = total + part
    return total


@dataclass(frozen=True)
class PeakModel:
    """The live-bytes MILP of one joint schedule, independent of the cap.

    Columns: ``saved`` of relevant item k at k, ``recomputed`` at n + k, then auxiliaries
    (membership, ``alive``), each defined by lower and upper bound terms on earlier columns.
    """

    problem: Problem
    relevant: tuple[int, ...]
    lower: tuple[tuple[tuple[float, tuple[tuple[int, float], ...]], ...], ...]  # per auxiliary
    upper: tuple[tuple[tuple[float, tuple[tuple[int, float], ...]], ...], ...]
    rows: tuple[tuple[float, tuple[tuple[int, float], ...]], ...]  # live bytes per recorded slot
    row_names: tuple[str, ...]
    # Items the model never recomputes: user outputs (the walk would free the forward copy
    # with the backward one, both held under one name).
    not_recomputed: frozenset[int]

    @property
    def columns(self) -> int:
        return 2 * len(self.relevant) + len(self.lower)

    @staticmethod
    def build(costed: object, schedule: JointSchedule) -> PeakModel:
        """``costed``: ``costing.Costed`` (its problem, joint graph and generator states)."""
        return _Builder(costed, schedule).model()

    def peak(self, plan: Plan) -> int:
        """The walk's peak for ``plan`` as the model states it (auxiliaries at their bounds)."""
        if plan.recomputed & self.not_recomputed:
            raise Unsupported("the plan recomputes a user output")
        values = self._values(plan)
        return round(max((_value(row, values) for row in self.rows), default=0.0))

    def _values(self, plan: Plan) -> np.ndarray:
        n = len(self.relevant)
        values = np.zeros(self.columns)
        for k, item in enumerate(self.relevant):
            values[k] = item in plan.saved
            values[n + k] = item in plan.recomputed
        for j, terms in enumerate(self.lower):
            best = max((_value(t, values) for t in terms), default=0.0)
            values[2 * n + j] = min(1.0, max(0.0, best))
        return values

    def solve(self, cap: int, *, time_limit: float) -> Plan | None:
        """The cheapest plan whose modelled peak is at most ``cap`` (None: none, or none in time)."""
        problem, n = self.problem, len(self.relevant)
        items = problem.items
        width = self.columns
        save = np.array([items[i].save_cost for i in self.relevant])
        recompute = np.array([items[i].recompute_cost for i in self.relevant])
        scale = max(save.max(initial=0.0), recompute.max(initial=0.0), 1e-30)
        objective = np.zeros(width)
        objective[:n], objective[n : 2 * n] = save / scale, recompute / scale
        rows: list[tuple[float, tuple[tuple[int, float], ...]]] = []  # (bound, entries) for <= bound
        col = {item: k for k, item in enumerate(self.relevant)}
        for k, i in enumerate(self.relevant):
            rows.append((1.0, ((k, 1.0), (n + k, 1.0))))  # not both
            if i in problem.needed:
                rows.append((-1.0, ((k, -1.0), (n + k, -1.0))))  # available
            rows += [(0.0, ((n + k, 1.0), (col[j], -1.0), (n + col[j], -1.0))) for j in items[i].inputs]
        for j, (lows, ups) in enumerate(zip(self.lower, self.upper, strict=True)):
            aux = 2 * n + j
            rows += [(-c, (*t, (aux, -1.0))) for c, t in lows]  # term <= aux
            rows += [(c, (*((k, -v) for k, v in t), (aux, 1.0))) for c, t in ups]  # aux <= term
        size_scale = float(max(cap, 1))
        limit = cap + 0.5  # bytes are integers: half a byte of room for HiGHS's tolerances
        rows += [((limit - c) / size_scale, tuple((k, v / size_scale) for k, v in t)) for c, t in self.rows]
        r_idx = [r for r, (_, entries) in enumerate(rows) for _ in entries]
        c_idx = [k for _, entries in rows for k, _ in entries]
        vals = [v for _, entries in rows for _, v in entries]
        matrix = coo_array((vals, (r_idx, c_idx)), shape=(len(rows), width)).tocsr()
        upper_bounds = np.ones(width)
        for k, i in enumerate(self.relevant):
            upper_bounds[k] = float(items[i].can_save)
            upper_bounds[n + k] = float(items[i].can_recompute and i not in self.not_recomputed)
        integrality = np.zeros(width)
        integrality[: 2 * n] = 1
        start = time.monotonic()
        # HiGHS's MIP is serial and seeded by default: the same model gives the same plan.
        result = milp(
            objective,
            integrality=integrality,
            bounds=Bounds(np.zeros(width), upper_bounds),
            constraints=LinearConstraint(matrix, -np.inf, np.array([b for b, _ in rows])),
            options={"time_limit": max(time_limit, 0.01), "mip_rel_gap": _GAP, "presolve": True},
        )
        log.debug("recompute_pass: peak MILP status %s in %.2fs", result.status, time.monotonic() - start)
        if result.x is None:
            return None
        chosen = np.round(result.x[: 2 * n]).astype(bool)
        plan = Plan(
            frozenset(self.relevant[k] for k in range(n) if chosen[k]),
            frozenset(self.relevant[k] for k in range(n) if chosen[n + k]),
        ).pruned(problem)
        if plan.violations(problem) or self.peak(plan) > cap:
            log.debug("recompute_pass: peak MILP solution rounds to an invalid plan; dropped")
            return None
        if result.status != _STATUS_OPTIMAL:
            log.debug("recompute_pass: peak MILP stopped by the time limit; its plan is not proven optimal")
        return plan


def _value(term: tuple[float, tuple[tuple[int, float], ...]], values: np.ndarray) -> float:
    const, entries = term
    return const + sum(v * values[k] for k, v in entries)


def _frozen(lin: _Lin) -> tuple[float, tuple[tuple[int, float], ...]]:
    return lin.const, tuple(sorted((k, v) for k, v in lin.coefs.items() if v != 0.0))


class _Builder:
    """Derives the model from the schedule; one pass, no plan."""

    def __init__(self, costed: object, schedule: JointSchedule) -> None:
        self.schedule = schedule
        self.problem: Problem = costed.problem  # type: ignore[attr-defined]
        joint = costed.joint  # type: ignore[attr-defined]
        self.candidates = joint.candidates
        self.facts = schedule.facts
        self.order = schedule.order
        self.relevant = tuple(sorted(self.problem.reach()))
        n = len(self.relevant)
        self.width = 2 * n
        self.lower: list[tuple] = []
        self.columns: dict[tuple, int] = {}
        self.upper: list[tuple] = []
        col = {item: k for k, item in enumerate(self.relevant)}
        index = {c.node: i for i, c in enumerate(joint.candidates)}
        user_outputs = schedule.user_outputs

        self.s = {node: decision_of(col, i, 0) for node, i in index.items()}
        self.r = {node: decision_of(col, i, n) for node, i in index.items() if node not in user_outputs}
        nodes = list(joint.module.graph.nodes)
        self.calls = [x for x in nodes if x.op == "call_function"]
        self.states = [  # (saved-state column, the draw it replays, bytes)
            (decision_of(col, state, 0), joint.candidates[draw].node, self.problem.items[state].size)
            for state, draw in sorted(costed.rng_states.items())  # type: ignore[attr-defined]
        ]
        self.member = {x: self._member(x) for x in self.calls}
        starts = [u for t in schedule.tangents for u in t.users if u in schedule.backward]
        self.first = min((self.order[u] for u in starts), default=-1)
        eligible = [x for x in self.calls if self.member[x].high() > 0]
        self.anchors = [x for x in eligible if self.order[x] >= self.first]
        self.pulled = [x for x in eligible if self.order[x] < self.first]
        self._check()

    def _member(self, node: fx.Node) -> _Lin:
        """In the walk's ``members``: ``(backward - saved) | recomputed``."""
        if node in self.schedule.backward:
            return _ONE - self.s[node] if node in self.s else _ONE
        return self.r.get(node, _ZERO)

    def _check(self) -> None:
        for node in self.calls:
            val = node.meta.get("val")
            if isinstance(val, list | tuple) and any(isinstance(v, list | tuple) for v in val):
                raise Unsupported(f"{node.name}: nested tuple results")

    def aux(self, lows: Sequence[_Lin], ups: Sequence[_Lin] = ()) -> _Lin:
        """A column pinned between ``max(lows)`` and ``min(ups)``; folded when constant."""
        lows = [t for t in lows if t.high() > 0]
        if any(t.low() >= 1 for t in lows):
            return _ONE
        if not lows:
            return _ZERO
        if not ups and len(lows) == 1 and lows[0].const == 0 and list(lows[0].coefs.values()) == [1.0]:
            return lows[0]
        key = (tuple(_frozen(t) for t in lows), tuple(_frozen(t) for t in ups))
        column = self.columns.get(key)
        if column is None:  # a storage's ``alive`` changes only where a use or its allocation is
            column = self.columns[key] = self.width + len(self.lower)
            self.lower.append(key[0])
            self.upper.append(key[1])
        return _Lin(0.0, {column: 1.0})

    def model(self) -> PeakModel:
        order, schedule = self.order, self.schedule
        gradients = schedule.gradients
        # Anchors present: members on a path to a gradient (their users are anchors too).
        self.p: dict[fx.Node, _Lin] = {}
        anchor_set = set(self.anchors)
        for a in reversed(self.anchors):
            users = [u for u in a.users if u in anchor_set]
            member = self.member[a]
            lows = [member] if a in gradients else []
            lows += [_and(self.p[u], member) for u in users]
            ups = [member, _sum(([_ONE] if a in gradients else []) + [self.p[u] for u in users])]
            self.p[a] = self.aux(lows, ups)
        # Forward: forward nodes, and the backward-only closure of saved values.
        self.f: dict[fx.Node, _Lin] = {x: _ONE for x in schedule.forward}
        for x in reversed(self.calls):
            if x in schedule.backward:
                users = [u for u in x.users if u in schedule.backward]
                saved = self.s.get(x, _ZERO)
                self.f[x] = self.aux(
                    [saved, *(self.f[u] for u in users)], [_sum([saved, *(self.f[u] for u in users)])]
                )
        # Pulled nodes: the anchors whose group may hold them, and e(m, a).
        pulled_set = set(self.pulled)
        self.touch: dict[fx.Node, list[int]] = {}
        for m in reversed(self.pulled):
            found = {order[u] for u in m.users if u in anchor_set}
            for u in m.users:
                if u in pulled_set:
                    found.update(self.touch[u])
            self.touch[m] = sorted(found)
        self.e: dict[tuple[fx.Node, int], _Lin] = {}
        for m in reversed(self.pulled):
            member = self.member[m]
            direct = [u for u in m.users if u in anchor_set]
            later = [u for u in m.users if u in pulled_set]
            previous = _ZERO
            for a in self.touch[m]:
                reached = [self.p[u] for u in direct if order[u] <= a] + [self.e_at(u, a) for u in later]
                lows = [previous, *(_and(q, member) for q in reached)]
                self.e[(m, a)] = previous = self.aux(lows, [member, _sum(reached)])
        return self._rows()

    def e_at(self, m: fx.Node, anchor: int, *, strict: bool = False) -> _Lin:
        """e(m, latest touching anchor <= anchor (or < when strict))."""
        best = None
        for a in self.touch[m]:
            if a < anchor or (a == anchor and not strict):
                best = a
        return _ZERO if best is None else self.e[(m, best)]

    # What runs where: the slot keys and each node's 0/1 expressions at a slot.
    def run_b(self, x: fx.Node) -> _Lin:
        if x in self.p:
            return self.p[x]
        if self.touch.get(x):
            return self.e[(x, self.touch[x][-1])]
        return _ZERO

    def alloc(self, x: fx.Node, key: Key) -> _Lin:
        """``x`` has run, in the phase of ``key``, at or before ``key``."""
        o = self.order[x]
        if key[0] == 0:
            return self.f.get(x, _ZERO) if o <= key[1] else _ZERO
        if x in self.p:
            return self.p[x] if (o, o) <= key[1:] else _ZERO
        if x in self.touch:
            return self.e_at(x, key[1], strict=o > key[2])
        return _ZERO

    def pending(self, x: fx.Node, key: Key) -> _Lin:
        """``x`` runs, in the phase of ``key``, at or after ``key``."""
        o = self.order[x]
        if key[0] == 0:
            return self.f.get(x, _ZERO) if o >= key[1] else _ZERO
        if x in self.p:
            return self.p[x] if (o, o) >= key[1:] else _ZERO
        if x in self.touch:
            return self.run_b(x) - self.e_at(x, key[1], strict=not o < key[2])
        return _ZERO

    def _rows(self) -> PeakModel:
        slots = self._slots()
        root = _storages(list(self.schedule.order), self.facts)
        found: dict[fx.Node, set[fx.Node]] = {}
        for x, owner in root.items():
            group = found.setdefault(owner, set())
            group.add(x)
            group.update(u for u in x.users if u.op == "call_function")
        # In graph order: the model's columns, and so HiGHS's answer, must not depend on hashing.
        uses = {owner: tuple(sorted(group, key=self.order.__getitem__)) for owner, group in found.items()}
        instances = self._instances(root, uses)
        first_group = {k for k, _ in slots if k[0] == 1 and k[1] == self.first}
        rows, names = [], []
        for key, node in slots:
            allocates = not _is_result(node) and root[node] is node
            workspace = self.facts.workspace(node)
            if not (allocates or workspace or key in first_group):
                continue
            total = _Lin()
            for size, terms in instances:
                total = total + self.aux([t(key) for t in terms]).scaled(float(size))
            runs = self.f.get(node, _ZERO) if key[0] == 0 else self._runs_at(node, key)
            total = total + runs.scaled(float(workspace))
            rows.append(_frozen(total))
            names.append(f"{'forward' if key[0] == 0 else 'backward'}:{node.name}")
        index = {c.node: i for i, c in enumerate(self.candidates)}
        outputs = frozenset(index[x] for x in self.schedule.user_outputs if x in index)
        return PeakModel(
            self.problem,
            self.relevant,
            tuple(self.lower),
            tuple(self.upper),
            tuple(rows),
            tuple(names),
            outputs,
        )

    def _runs_at(self, node: fx.Node, key: Key) -> _Lin:
        if node in self.p:
            return self.p[node]
        return self.e_at(node, key[1]) - self.e_at(node, key[1], strict=True)

    def _slots(self) -> list[tuple[Key, fx.Node]]:
        order = self.order
        slots = [((0, order[x], order[x]), x) for x in self.calls if self.f.get(x, _ZERO).high() > 0]
        for m, anchors in self.touch.items():
            slots += [((1, a, order[m]), m) for a in anchors]
        slots += [((1, order[a], order[a]), a) for a in self.anchors]
        return sorted(slots, key=lambda s: s[0])

    def _instances(self, root: dict[fx.Node, fx.Node], uses: dict[fx.Node, tuple[fx.Node, ...]]) -> list:
        """(bytes, lower-bound terms as functions of the slot) per storage instance."""
        schedule, facts = self.schedule, self.facts
        kept_f = {root[x] for x in schedule.user_outputs}
        kept_b = {root[x] for x in schedule.gradients}
        out: list = []

        def keep_f(x: fx.Node) -> _Lin:
            return _ONE if x in kept_f else (self.s.get(x, _ZERO) if x in self.s else _ZERO)

        def storage(size: int, op: fx.Node, owner: fx.Node | None, op_uses: tuple[fx.Node, ...]) -> None:
            """A result of ``op``, held under ``owner``'s name while ``owner`` runs in the phase
            (``owner is op`` for a single result), else under the op's name until its last use."""
            if not size:
                return
            holder = op if owner is None else owner
            for phase in (0, 1):
                terms = []
                if owner is op:
                    terms += [
                        _at(lambda k, u=u: _and(self.alloc(op, k), self.pending(u, k))) for u in uses[op]
                    ]
                else:
                    held = _ZERO if owner is None else self._present(owner, phase)
                    terms += [
                        _at(lambda k, u=u, h=held: _and(self.alloc(op, k), self.pending(u, k), h))
                        for u in uses.get(owner, ())
                    ]
                    terms += [
                        _at(lambda k, w=w, h=held: _and(self.alloc(op, k), self.pending(w, k), _ONE - h))
                        for w in op_uses
                    ]
                kept = keep_f(holder) if phase == 0 else (_ONE if holder in kept_b else _ZERO)
                if kept.high() > 0:
                    held = _ONE if owner is op else self._present(holder, phase)
                    terms.append(_at(lambda k, c=kept, h=held: _and(self.alloc(op, k), c, h)))
                out.append((size, [_in_phase(t, phase) for t in terms]))
            # Kept past the forward: alive in backward until its last backward use, if any.
            kept = keep_f(holder)
            if kept.high() > 0:
                later = uses.get(holder, ())
                carried = [_at(lambda k, u=u: _and(kept, self.pending(u, k))) for u in later]
                carried.append(_at(lambda k: kept - _sum([self.run_b(u) for u in later])))
                out.append((size, [_in_phase(t, 1) for t in carried]))

        for x in self.calls:
            if root[x] is not x or _is_result(x):
                continue
            val = x.meta.get("val")
            if isinstance(val, list | tuple):
                getitems = {u.args[1]: u for u in x.users if u.target is operator.getitem}
                for k, part in enumerate(val):
                    size = facts.hints.evaluate(tensor_bytes(part))
                    storage(size, x, getitems.get(k), uses.get(x, ()))
            else:
                storage(facts.bytes(x, x.name, val), x, x, ())
        for tangent in schedule.tangents:
            size = facts.bytes(tangent, tangent.name, tangent.meta.get("val"))
            if size:
                users = tuple(u for u in uses.get(tangent, ()) if u is not tangent)
                terms = [lambda k, u=u: self.pending(u, k) for u in users]
                terms.append(lambda k, users=users: _ONE - _sum([self.run_b(u) for u in users]))
                out.append((size, [_in_phase(t, 1) for t in terms]))
        for saved, draw, size in self.states:
            if size:
                out.append(
                    (size, [_in_phase(lambda k, s=saved, d=draw: s if self.order[d] <= k[1] else _ZERO, 0)])
                )
                out.append(
                    (
                        size,
                        [
                            _in_phase(lambda k, s=saved, d=draw: _and(s, self.pending(d, k)), 1),
                            _in_phase(lambda k, s=saved, d=draw: s - self.run_b(d), 1),
                        ],
                    )
                )
        return out

    def _present(self, x: fx.Node, phase: int) -> _Lin:
        return self.f.get(x, _ZERO) if phase == 0 else self.run_b(x)


def decision_of(col: dict[int, int], item: int, offset: int) -> _Lin:
    """Item ``item``'s saved (offset 0) or recomputed (offset n) column; 0 when irrelevant."""
    return _Lin(0.0, {offset + col[item]: 1.0}) if item in col else _ZERO


def _sum(parts: Iterable[_Lin]) -> _Lin:
    total = _Lin()
    for part in parts:
        total = total + part
    return total


Term = Callable[[Key], _Lin]


def _at(term: Term) -> Term:
    """A lower-bound term on a storage's ``alive`` at a slot (typing aid for lambdas)."""
    return term


def _in_phase(term: Term, phase: int) -> Term:
    return lambda k: term(k) if k[0] == phase else _ZERO


# Graphs above this many call nodes are not modelled (building the model alone takes
# seconds there), models above ``MAX_COLUMNS`` columns not solved. Measured on these 2
# cores: an 87-call chain (1.1k columns) solves in 0.4-0.8 s; the zoo's blocks (210-350
# calls, 4-7k columns) take 3-20 s per cap, often stopped by the limit.
MAX_CALLS = 100
MAX_COLUMNS = 2000


@dataclass(frozen=True)
class PeakSolver:
    """The MILP as ``peak_budget.choose_by_peak`` asks for it: plans at a few caps."""

    model: PeakModel
    time_limit: float  # per cap

    @staticmethod
    def of(costed: object, schedule: JointSchedule, *, time_limit: float) -> PeakSolver | None:
        """None when the graph is too large to solve within about a second, or unsupported."""
        calls = sum(n.op == "call_function" for n in schedule.order)
        if calls > MAX_CALLS:
            log.debug("recompute_pass: peak MILP skipped: %d call nodes > %d", calls, MAX_CALLS)
            return None
        try:
            model = PeakModel.build(costed, schedule)
        except Unsupported as reason:
            log.debug("recompute_pass: peak MILP skipped: %s", reason)
            return None
        except Exception:  # an extra source of plans, never worth failing the compile for
            log.warning("recompute_pass: peak MILP skipped: building it failed", exc_info=True)
            return None
        if model.columns == 0:  # nothing to decide
            return None
        if model.columns > MAX_COLUMNS:
            log.debug("recompute_pass: peak MILP skipped: %d columns > %d", model.columns, MAX_COLUMNS)
            return None
        return PeakSolver(model, time_limit)

    def plans(self, caps: Iterable[int], deadline: float) -> list[Plan]:
        """The cheapest plan at each cap (walk-peak bytes), as far as the deadline allows."""
        found: list[Plan] = []
        for cap in sorted(set(caps)):
            left = deadline - time.monotonic()
            if left <= 0:
                log.debug("recompute_pass: peak MILP stopped by the deadline")
                break
            plan = self.model.solve(cap, time_limit=min(self.time_limit, left))
            if plan is not None:
                found.append(plan)
        return found


def estimate_caps(budget: int, low: tuple[int, int], high: tuple[int, int]) -> tuple[int, ...]:
    """Caps on the walk's scale for a budget on the exact scale: the lowest peak's estimate,
    and the budget mapped linearly between the two checked ends ``(exact, estimate)``."""
    (exact_low, estimate_low), (exact_high, estimate_high) = low, high
    if exact_high == exact_low:
        return (estimate_low, max(estimate_low, estimate_high))
    share = min(1.0, max(0.0, (budget - exact_low) / (exact_high - exact_low)))
    return (estimate_low, estimate_low + int(share * (estimate_high - estimate_low)))
