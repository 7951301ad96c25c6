"""Keep/recompute/offload on small problems: the joint MILP against brute force, the fast
path and the link schedule within their windows and the host cap. No graphs: plain data."""

from __future__ import annotations

import itertools
import random

import pytest

from recompute_pass.offloading.link import backward_slots, forward_slots
from recompute_pass.offloading.problem import OffloadItem, OffloadProblem
from recompute_pass.offloading.solve import greedy, solve_joint
from recompute_pass.solver.problem import Item, Plan, Problem


def _random_case(seed: int) -> tuple[Problem, OffloadProblem]:
    """A small DAG of items (inputs earlier), some random (never recomputed), some
    offloadable with random windows, and a random host cap."""
    rng = random.Random(seed)
    n = rng.randint(4, 6)
    items = []
    for i in range(n):
        inputs = tuple(sorted(rng.sample(range(i), k=min(i, rng.randint(0, 2)))))
        items.append(
            Item(
                name=f"v{i}",
                size=rng.choice([0, 1, 2, 4, 8]) * 1000,
                save_cost=rng.uniform(0.0, 1.0),
                recompute_cost=rng.uniform(0.0, 3.0),
                inputs=inputs,
                can_save=rng.random() > 0.1,
                can_recompute=i > 0 and rng.random() > 0.2,  # v0: an input, or a random draw
            )
        )
    needed = frozenset(rng.sample(range(n), k=rng.randint(1, n)))
    problem = Problem(tuple(items), needed)
    forward = rng.uniform(1.0, 3.0)
    offloadable = [i for i in range(n) if items[i].size > 0 and rng.random() > 0.3]
    readers = {i: tuple(j for j in range(n) if i in items[j].inputs) for i in offloadable}
    offload = OffloadProblem(
        tuple(
            OffloadItem(
                item=i,
                size=items[i].size,
                d2h_seconds=items[i].size / 4000 * rng.uniform(0.5, 1.5),
                h2d_seconds=items[i].size / 4000 * rng.uniform(0.5, 1.5),
                release=rng.uniform(0.0, forward),
                deadline=rng.uniform(0.0, 3.0),
                readers=readers[i],
            )
            for i in offloadable
        ),
        forward_seconds=forward,
        backward_seconds=3.0,
        host_bytes=rng.choice([None, 4000, 8000]),
    )
    return problem, offload


def _brute_force(problem: Problem, offload: OffloadProblem, budget: int) -> float | None:
    """The cheapest cost over every keep/recompute/offload assignment that fits."""
    best = None
    offloadable = offload.by_item.keys()
    choices = [
        ("none", "save", "recompute", *(("offload",) if i in offloadable else ()))
        for i in range(len(problem))
    ]
    for states in itertools.product(*choices):
        saved = frozenset(i for i, s in enumerate(states) if s in ("save", "offload"))
        recomputed = frozenset(i for i, s in enumerate(states) if s == "recompute")
        plan = Plan(saved, recomputed, frozenset(i for i, s in enumerate(states) if s == "offload"))
        if plan.violations(problem) or not offload.fits(plan.offloaded, plan.recomputed):
            continue
        if plan.device_size(problem) <= budget:
            cost = plan.cost(problem)
            best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_joint_milp_matches_brute_force(seed: int) -> None:
    problem, offload = _random_case(seed)
    total = sum(it.size for it in problem.items)
    for budget in (0, total // 4, total // 2, total):
        expected = _brute_force(problem, offload, budget)
        result = solve_joint(problem, offload, budget, time_limit=5.0)
        if expected is None:
            assert result.plan is None, (seed, budget)
            continue
        plan = result.plan
        assert plan is not None and result.optimal, (seed, budget, result.status)
        # Never over a window, the host cap or the device budget; as cheap as the best.
        assert not plan.violations(problem)
        assert not offload.violations(plan.offloaded, plan.recomputed)
        assert plan.device_size(problem) <= budget
        assert plan.cost(problem) == pytest.approx(expected, rel=1e-6, abs=1e-9), (seed, budget)


def test_offload_buys_recomputation_under_a_device_budget() -> None:
    """One big value, expensive to recompute: with room on the link, the MILP offloads it
    instead; without (a window too short, or no host room), it recomputes."""
    items = (
        Item("x", 0, 0.0, 0.0, (), can_save=True, can_recompute=False),
        Item("big", 1000, 0.1, 5.0, (0,), can_save=True, can_recompute=True),
    )
    problem = Problem(items, frozenset({1}))

    def offload(d2h: float, host: int | None) -> OffloadProblem:
        item = OffloadItem(1, 1000, d2h, 0.1, release=0.5, deadline=1.0)
        return OffloadProblem((item,), forward_seconds=1.0, backward_seconds=2.0, host_bytes=host)

    room = solve_joint(problem, offload(0.4, None), 0, time_limit=5.0).plan
    assert room is not None and room.offloaded == {1} and not room.recomputed
    for cramped in (offload(0.6, None), offload(0.4, 999)):  # the copy out overruns; the host is full
        plan = solve_joint(problem, cramped, 0, time_limit=5.0).plan
        assert plan is not None and plan.recomputed == {1} and not plan.offloaded
    # With device room to spare, nothing is offloaded (a transfer buys nothing then).
    plan = solve_joint(problem, offload(0.4, None), 1000, time_limit=5.0).plan
    assert plan is not None and plan.saved == {1} and not plan.offloaded


@pytest.mark.parametrize("seed", range(40))
def test_greedy_stays_within_windows_and_host_cap(seed: int) -> None:
    problem, offload = _random_case(seed)
    saved = frozenset(o.item for o in offload.items)
    plan = greedy(problem, Plan(saved, frozenset()), offload)
    assert plan.offloaded <= saved and offload.fits(plan.offloaded)
    # Maximal: no value left out would still fit.
    for o in offload.items:
        if o.item not in plan.offloaded:
            assert not offload.fits([*plan.offloaded, o.item])


def test_window_rows() -> None:
    items = (
        OffloadItem(0, 10, 1.0, 1.0, release=0.0, deadline=2.0),
        OffloadItem(1, 10, 1.0, 1.0, release=1.0, deadline=1.0),
    )
    problem = OffloadProblem(items, forward_seconds=2.0, backward_seconds=3.0, host_bytes=15)
    assert problem.fits([0]) and problem.fits([1])
    assert any("host bytes" in v for v in problem.violations([0, 1]))
    loose = OffloadProblem(items, 2.0, 3.0, None)
    assert loose.fits([0, 1])  # out: 1s from 0, then 1s from 1; back: 1 by 1s, 0 by 2s
    tight = OffloadProblem(items, 1.9, 3.0, None)
    assert any("device-to-host" in v for v in tight.violations([0, 1]))
    late = OffloadProblem((items[0], OffloadItem(1, 10, 1.0, 1.0, 1.0, deadline=0.5)), 2.0, 3.0, None)
    assert any("host-to-device" in v for v in late.violations([1]))
    reader = OffloadProblem((OffloadItem(0, 10, 0.1, 0.1, 0.0, 1.0, readers=(3,)),), 1.0, 1.0, None)
    assert reader.fits([0]) and not reader.fits([0], recomputed=[3])


def test_link_schedule() -> None:
    runtimes = [1.0, 1.0, 1.0, 1.0]
    out = forward_slots(runtimes, [("a", 0, 1.5), ("b", 0, 2.0)])
    assert out["a"].position == 2 and out["a"].exposed == 0.0  # 1 .. 2.5: done during node 2
    assert out["b"].position == 3 and out["b"].exposed == pytest.approx(0.5)  # 2.5 .. 4.5
    back = backward_slots(runtimes, [("a", 3, 1.5), ("b", 2, 1.0), ("c", 1, 1.0)])
    assert back["a"].position == 1 and back["a"].exposed == 0.0  # 1.5 .. 3
    assert back["b"].position == 0 and back["b"].exposed == 0.0  # 0.5 .. 1.5
    assert back["c"].position == 0 and back["c"].exposed == pytest.approx(0.5)  # the link is busy
