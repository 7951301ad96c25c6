"""The same plan on every rank.

Ranks that partition one graph differently run different forward and backward graphs:
their memory differs, and once Inductor schedules them, the collectives in them may be
issued in a different order, which deadlocks. The solver is deterministic, but what it is
given need not be equal on every rank: a per-rank device profile (a measured calibration),
the MILP's time limit, a size hint.

So each plan gets a digest: a hash of the joint graph and of the saved/recomputed names
(``PartitionReport.plan_digest``). Under an initialised process group of more than one
rank (option ``sync_plans``), the partitioner exchanges it at compile time through the
group's key-value store, not through collectives: a collective issued from inside a
compile interleaves with the user's own (FSDP's asynchronous gathers, a gloo group's
worker threads) and shifts the group's collective sequence; on 2 loaded gloo ranks under
FSDP2, such all-gathers and broadcasts hung now and then (gloo's cause not found). On a
mismatch, every rank takes rank 0's plan: rank 0 posts its saved and recomputed names,
the others rebuild that plan on their own graph and check it, and a second exchange
confirms that every rank holds it. Each process logs one warning. A rank that cannot
rebuild the plan (its graph differs), a partition that failed on some ranks only, or a
peer that posts nothing within the store's timeout makes the ranks raise
``PlanSyncError`` rather than train with different plans.

Assumption: every rank of the default group partitions the same graphs, in the same order
(SPMD: DDP, FSDP2, tensor parallel; the partitioner runs inside each rank's compile): the
n-th exchange of each rank is about the same graph. It does not hold for pipeline stages,
rank-dependent graph breaks or recompiles, or a compile cache warm on some ranks only: the
exchange then pairs unrelated graphs, or waits for the store's timeout. Use
``sync_plans=False`` there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import fx

from recompute_pass import torch_internals as ti
from recompute_pass.graph.costing import Costed
from recompute_pass.options import RecomputeOptions
from recompute_pass.report.naming import canonical_names, describe_shape
from recompute_pass.search.decide import Decision
from recompute_pass.solver.problem import Plan

log = logging.getLogger(__name__)

_HASH_BYTES = 32  # sha256
# The plan hash a rank posts when its partition failed (it falls back or raises).
_FAILED = hashlib.sha256(b"recompute_pass: no plan").digest()


class PlanSyncError(RuntimeError):
    """Ranks could not agree on a plan (their graphs differ, a rank's partition failed, a
    peer posted nothing). Never turned into a fallback: a fallback on some ranks only is
    what this module prevents."""


@dataclass(frozen=True)
class Synced:
    decision: Decision  # the rank's own, or rank 0's plan rebuilt on this rank
    digest: str  # ``PartitionReport.plan_digest``


def rank_and_world() -> tuple[int, int]:
    """This process's rank in the default group and the group's size; (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def agree(costed: Costed, decision: Decision, options: RecomputeOptions) -> Synced:
    """The plan every rank uses, and its digest (see the module docstring)."""
    keys = item_keys(costed)
    graph = graph_digest(costed.joint.module.graph)
    own = _plan_hash(keys, decision.plan)
    rank, world = rank_and_world()
    if not options.sync_plans or world == 1:
        return Synced(decision, _digest(graph, own))
    with _exchanging():
        exchange = _Exchange.open(rank, world)
        gathered = exchange.gather("digest", graph + own)
        plans = [g[_HASH_BYTES:] for g in gathered]
        if _FAILED in plans or all(p == plans[0] for p in plans):
            exchange.close()
            _raise_if_some_failed(plans)
            if any(g[:_HASH_BYTES] != graph for g in gathered):
                log.debug("recompute_pass: graphs differ across ranks (shapes?), plans agree")
            return Synced(decision, _digest(graph, own))
        differ = [r for r, p in enumerate(plans) if p != plans[0]]
        if rank == 0:
            exchange.post("names", json.dumps(_plan_names(keys, decision.plan)).encode())
        adopted, error = decision, ""
        if rank in differ:
            try:
                saved, recomputed = json.loads(exchange.read("names", 0))
                adopted = _adopt(costed, decision, keys, saved, recomputed)
            except PlanSyncError as failure:
                error = str(failure)
        # Zeros from a rank that failed: every rank sees it and raises the same error.
        mine = _plan_hash(keys, adopted.plan) if not error else bytes(_HASH_BYTES)
        confirmed = [g[_HASH_BYTES:] for g in exchange.gather("confirm", graph + mine)]
        exchange.close()
    failed = [r for r, p in enumerate(confirmed) if p != plans[0]]
    if failed:
        raise PlanSyncError(
            f"recompute_pass: rank(s) {failed} could not use rank 0's plan"
            f"{': ' + error if error else ''}. Every rank must partition the same graphs in "
            "the same order (not so under pipeline parallelism); set sync_plans=False if "
            "ranks compile different graphs."
        )
    _warn(differ)
    note = (
        "plan of rank 0 (this rank's own differed)"
        if rank in differ
        else f"rank(s) {differ} planned differently and took rank 0's plan"
    )
    adopted = dataclasses.replace(adopted, notes=(*adopted.notes, note))
    return Synced(adopted, _digest(graph, _plan_hash(keys, adopted.plan)))


def agree_to_fail(options: RecomputeOptions) -> None:
    """A rank whose partition failed still takes its turn, posting no plan: PyTorch's
    partition on every rank is one plan, on some ranks only it is not. Raises
    ``PlanSyncError`` unless every rank failed too."""
    rank, world = rank_and_world()
    if not options.sync_plans or world == 1:
        return
    with _exchanging():
        exchange = _Exchange.open(rank, world)
        plans = [g[_HASH_BYTES:] for g in exchange.gather("digest", bytes(_HASH_BYTES) + _FAILED)]
        exchange.close()
    _raise_if_some_failed(plans)


def _raise_if_some_failed(plans: list[bytes]) -> None:
    failed = [r for r, p in enumerate(plans) if p == _FAILED]
    if failed and len(failed) < len(plans):
        raise PlanSyncError(
            f"recompute_pass: rank(s) {failed} could not partition this graph (see their logs) "
            "while the others could; every rank raises rather than train with different plans."
        )


@contextlib.contextmanager
def _exchanging() -> Iterator[None]:
    """The store's errors (its timeout: a peer that never posts) as ``PlanSyncError``: no
    rank may fall back, and go on, alone."""
    try:
        yield
    except PlanSyncError:
        raise
    except Exception as error:
        raise PlanSyncError(
            f"recompute_pass: ranks could not exchange plans ({type(error).__name__}: {error}). "
            "Every rank must partition the same graphs in the same order; set sync_plans=False "
            "if ranks compile different graphs."
        ) from error


_warned = False


def _warn(differ: list[int]) -> None:
    """One warning per process; later mismatches at INFO (each report notes it too)."""
    global _warned
    message = (
        "recompute_pass: partition plans differed across ranks (rank(s) %s against rank 0: "
        "per-rank device profiles, a solver time limit?); every rank uses rank 0's plan"
    )
    if _warned:
        log.info(message, differ)
    else:
        _warned = True
        log.warning(message + "; further mismatches are logged at INFO", differ)


def item_keys(costed: Costed) -> tuple[str, ...]:
    """A name per problem item, equal across processes for the same graph: the report's
    canonical node names, and ``<draw>/rng_state`` for a draw's generator state."""
    candidates = costed.joint.candidates
    names = canonical_names(costed.joint.module.graph.nodes)
    keys = [names[c.node] for c in candidates]
    keys += [f"{keys[costed.rng_states[i]]}/rng_state" for i in range(len(candidates), len(costed.problem))]
    if len(set(keys)) != len(keys):
        raise RuntimeError("recompute_pass: canonical node names are not unique")
    return tuple(keys)


def graph_digest(graph: fx.Graph) -> bytes:
    """A hash of the graph's structure: per node its op, target, inputs (by position),
    numeric constants, shape and dtype. Node names, devices and strings (process-group
    names) are left out: they may differ between ranks running the same program."""
    position: dict[fx.Node, int] = {}
    digest = hashlib.sha256()
    for i, node in enumerate(graph.nodes):
        position[node] = i
        target = node.target
        if not isinstance(target, str):
            name = getattr(target, "__name__", type(target).__name__)
            target = f"{getattr(target, 'namespace', '')}::{name}"
        elif node.op == "placeholder":
            target = ""
        args = _literal((node.args, node.kwargs), position)
        shape, dtype = describe_shape(node.meta.get("val"))
        digest.update(repr((node.op, target, args, shape, dtype)).encode())
    return digest.digest()


def partition_digest(forward: fx.GraphModule, backward: fx.GraphModule) -> str:
    """The digest of a partition made by someone else (PyTorch's, on fallback): its graphs."""
    return hashlib.sha256(graph_digest(forward.graph) + graph_digest(backward.graph)).hexdigest()


def _literal(value: object, position: dict[fx.Node, int]) -> object:
    if isinstance(value, fx.Node):
        return f"%{position[value]}"
    if isinstance(value, list | tuple):
        return tuple(_literal(v, position) for v in value)
    if isinstance(value, dict):
        return tuple((k, _literal(v, position)) for k, v in value.items())
    if value is None or isinstance(value, bool | int | float | torch.dtype):
        return str(value)
    return type(value).__name__


def _plan_names(keys: Sequence[str], plan: Plan) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(sorted(keys[i] for i in plan.saved)), tuple(sorted(keys[i] for i in plan.recomputed))


def _plan_hash(keys: Sequence[str], plan: Plan) -> bytes:
    saved, recomputed = _plan_names(keys, plan)
    return hashlib.sha256(repr((saved, recomputed)).encode()).digest()


def _digest(graph: bytes, plan: bytes) -> str:
    return hashlib.sha256(graph + plan).hexdigest()


@dataclass(frozen=True)
class _Exchange:
    """One graph's exchange between the ranks, on the default group's store.

    Its keys carry the round: each rank counts its own exchanges in the store (``add`` on
    a per-rank key), so the n-th graph of every rank meets under the same keys, also in a
    later process group on the same store. The last rank to finish deletes the round's keys.
    """

    store: dist.Store
    prefix: str
    rank: int
    world: int

    @staticmethod
    def open(rank: int, world: int) -> _Exchange:
        store = ti.default_store()
        round_ = store.add(f"recompute_pass/plan/rank{rank}/rounds", 1)
        return _Exchange(store, f"recompute_pass/plan/{round_}", rank, world)

    def key(self, what: str, rank: int) -> str:
        return f"{self.prefix}/{what}/{rank}"

    def post(self, what: str, payload: bytes) -> None:
        self.store.set(self.key(what, self.rank), payload)

    def read(self, what: str, rank: int) -> bytes:
        """Waits up to the store's timeout for ``rank`` to post."""
        return bytes(self.store.get(self.key(what, rank)))

    def gather(self, what: str, payload: bytes) -> list[bytes]:
        """Every rank's post, in one request (it waits for all of them)."""
        self.post(what, payload)
        return [bytes(v) for v in self.store.multi_get([self.key(what, r) for r in range(self.world)])]

    def close(self) -> None:
        if self.store.add(f"{self.prefix}/done", 1) == self.world:
            for what in ("digest", "confirm", "names"):
                for r in range(self.world):
                    self.store.delete_key(self.key(what, r))
            self.store.delete_key(f"{self.prefix}/done")


def _adopt(
    costed: Costed, decision: Decision, keys: Sequence[str], saved: Sequence[str], recomputed: Sequence[str]
) -> Decision:
    """Rank 0's plan on this rank's graph, checked like any solver's plan."""
    index = {key: i for i, key in enumerate(keys)}
    missing = sorted(k for k in (*saved, *recomputed) if k not in index)
    if missing:
        raise PlanSyncError(f"its graph lacks values rank 0's plan names: {missing[:5]}")
    plan = Plan(frozenset(index[k] for k in saved), frozenset(index[k] for k in recomputed))
    violations = plan.violations(costed.problem)
    if violations:
        raise PlanSyncError(f"rank 0's plan is invalid on its graph: {violations[:5]}")
    notes = decision.notes
    size = plan.size(costed.problem)
    if decision.budget_kind == "saved" and size > decision.budget_bytes:  # a peak: see the report
        notes = (*notes, f"rank 0's plan is {size - decision.budget_bytes} B over this rank's budget")
    return dataclasses.replace(decision, plan=plan, optimal=False, notes=notes)
