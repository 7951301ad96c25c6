"""The partitioner's settings as one validated, immutable record.

Validation happens here, when an option is set, so that a budget of 1.7 fails at the
user's line and not deep inside a compile minutes later.
"""

from __future__ import annotations

import dataclasses
import decimal
import hashlib
import math
import numbers
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cost_model import PROFILES, DeviceProfile
from recompute_pass.solver.strategies import STRATEGIES

SOLVERS = tuple(STRATEGIES)  # the registry is the list: a new strategy is a valid solver
DEVICES = ("auto", "measure", *sorted(PROFILES))


BUDGET_MODES = ("peak", "saved")
PEAK_MODELS = ("auto", "graph")


def _fail(option: str, value: object, valid: str) -> ValueError:
    return ValueError(f"recompute_pass: invalid {option}={value!r}; expected {valid}")


@dataclass(frozen=True)
class RecomputeOptions:
    """What the partitioner reads. Every field enters the compile cache key (``cache_key``).

    memory_budget: ratio in [0, 1] of the range of what ``budget_mode`` measures (README,
        "Budget semantics").
    memory_budget_bytes: absolute cap on saved activation bytes; overrides the ratio and
        implies ``"saved"``.
    budget_mode: ``"peak"``, the ratio spans the step's predicted peak; ``"saved"``, it
        spans the activation bytes saved for backward (what PyTorch's
        ``activation_memory_budget`` measures).
    peak_memory_bytes: absolute cap on the step's predicted peak (implies ``"peak"``).
        Byte caps (these two and ``offload_host_bytes``) may be given as a whole float
        (``24e9``) or a size string (``"24GiB"``, ``"24GB"``, ``"1.5GiB"``: ``byte_count``)
        and are stored as an int, so every spelling of one size is one cache key.
    peak_model: how the peak is predicted. ``"auto"``: from Inductor's own memory plan
        when Inductor compiles the graphs (``inductor_memory``), from the graphs
        themselves otherwise (``liveness``); ``"graph"``: always from the graphs, which
        saves Inductor's lowering (a second or so per plan) and mispredicts its peak.
    solver: one of ``SOLVERS``.
    device: a profile name from ``cost_model.PROFILES``, ``"auto"`` (from the graph's
        device), ``"measure"`` (each candidate op timed on the graph's device, cached on
        disk: ``cost_model.measure``), or a ``DeviceProfile``.
    time_limit: seconds the exact solver may spend per graph before it falls back to the
        best plan found so far.
    fallback: on an internal error, partition with PyTorch's default partitioner (with a
        warning) instead of failing the compile.
    sync_plans: under an initialised process group of more than one rank, check at compile
        time that every rank chose the same plan, and make every rank use rank 0's when
        not (``recompute_pass.plan_sync``); no effect in a single process.
    profile_time_limit: ``device="measure"``: seconds of op timing per graph; what is left
        untimed is priced by the roofline. 0 times nothing new (the cache only).
    profile_cache_dir: ``device="measure"``: where op times are cached; None is
        ``$TORCH_RECOMPUTE_CACHE_DIR`` or ``~/.cache/torch_recompute``.
    plan_sizes: plan for these sizes instead of the traced ones: a mapping from a
        dimension's Dynamo source name (as guards print it, ``"L['idx'].size()[1]"``) to
        the size at which its symbol is evaluated when choosing the plan (costs, peaks).
        Under ``dynamic=True`` the plan then fits the size it was made for, whatever size
        the first call traced (``recompute_pass.fit_longest`` sets it). Stored as sorted
        ``(name, size)`` pairs: one spelling, one cache key.
    offload: a third choice per saved value, besides keep and recompute: offload it to
        host memory after its last forward use and reload it before its first backward
        use, where the device profile's host link hides the transfer in compute
        (``recompute_pass.offloading.problem``). Needs a peak budget and solver ``milp`` (exact, joint
        MILP) or ``mincut`` (greedy). Off by default: unmeasured on a GPU so far.
    offload_host_bytes: with ``offload``, a cap on the host bytes offloaded values hold
        (None: no cap).
    plan_steps: under a step budget (a peak ratio below 1, or a peak cap), choose every
        graph's plan for the training step the graphs run in together (per-block compile,
        graph breaks, DDP's buckets: ``recompute_pass.step``), so that the budget holds for
        the step; False plans each graph alone, as if it were the step (pipeline stages,
        whose microbatches' steps interleave).
    """

    memory_budget: float = 1.0
    memory_budget_bytes: int | None = None
    budget_mode: str = "peak"
    peak_memory_bytes: int | None = None
    peak_model: str = "auto"
    solver: str = "milp"
    device: str | DeviceProfile = "auto"
    time_limit: float = 10.0
    fallback: bool = True
    sync_plans: bool = True
    profile_time_limit: float = 10.0
    profile_cache_dir: str | None = None
    plan_sizes: tuple[tuple[str, int], ...] | None = None
    offload: bool = False
    offload_host_bytes: int | None = None
    plan_steps: bool = True

    def __post_init__(self) -> None:
        budget = self.memory_budget
        if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
            raise _fail("memory_budget", budget, "a number in [0, 1]")
        if math.isnan(budget) or not 0.0 <= budget <= 1.0:
            raise _fail("memory_budget", budget, "a number in [0, 1]")
        object.__setattr__(self, "memory_budget", float(budget))
        for name in ("memory_budget_bytes", "peak_memory_bytes", "offload_host_bytes"):
            object.__setattr__(self, name, byte_count(name, getattr(self, name)))
        if self.budget_mode not in BUDGET_MODES:
            raise _fail("budget_mode", self.budget_mode, f"one of {', '.join(BUDGET_MODES)}")
        if self.memory_budget_bytes is not None and self.peak_memory_bytes is not None:
            raise _fail(
                "peak_memory_bytes", self.peak_memory_bytes, "None when memory_budget_bytes is set (one cap)"
            )
        if self.peak_model not in PEAK_MODELS:
            raise _fail("peak_model", self.peak_model, f"one of {', '.join(PEAK_MODELS)}")
        if self.solver not in SOLVERS:
            raise _fail("solver", self.solver, f"one of {', '.join(SOLVERS)}")
        if not isinstance(self.device, DeviceProfile) and self.device not in DEVICES:
            raise _fail("device", self.device, f"one of {', '.join(DEVICES)} or a cost_model.DeviceProfile")
        limit = self.time_limit
        if isinstance(limit, bool) or not isinstance(limit, numbers.Real) or not limit > 0:
            raise _fail("time_limit", limit, "a positive number of seconds")
        if math.isinf(limit):
            raise _fail("time_limit", limit, "a finite positive number of seconds")
        if not isinstance(self.fallback, bool):
            raise _fail("fallback", self.fallback, "True or False")
        if not isinstance(self.sync_plans, bool):
            raise _fail("sync_plans", self.sync_plans, "True or False")
        if not isinstance(self.plan_steps, bool):
            raise _fail("plan_steps", self.plan_steps, "True or False")
        self._check_offload()
        limit = self.profile_time_limit
        if isinstance(limit, bool) or not isinstance(limit, numbers.Real) or not 0 <= limit < math.inf:
            raise _fail("profile_time_limit", limit, "a finite number of seconds >= 0")
        object.__setattr__(self, "profile_time_limit", float(limit))
        folder = self.profile_cache_dir
        if folder is not None:
            path = os.fspath(folder) if isinstance(folder, (str, os.PathLike)) else None
            if not isinstance(path, str) or not path:
                raise _fail("profile_cache_dir", folder, "None or a directory path")
            # One spelling, so that the cache key does not depend on how the path was given.
            object.__setattr__(self, "profile_cache_dir", path)
        object.__setattr__(self, "plan_sizes", _plan_sizes(self.plan_sizes))

    def plan_size_map(self) -> dict[str, int]:
        """``plan_sizes`` as a dict (empty when unset)."""
        return dict(self.plan_sizes or ())

    def _check_offload(self) -> None:
        if not isinstance(self.offload, bool):
            raise _fail("offload", self.offload, "True or False")
        if not self.offload:
            return
        if not self.budgets_peak:
            raise _fail("offload", True, "False unless the budget is over the peak (budget_mode='peak')")
        if self.solver not in ("milp", "mincut"):
            raise _fail("offload", True, f"False with solver={self.solver!r} (offload needs milp or mincut)")

    @property
    def budgets_peak(self) -> bool:
        """Whether the budget is over the step's peak (else over saved bytes): an absolute
        cap says which; else ``budget_mode``."""
        if self.peak_memory_bytes is not None or self.memory_budget_bytes is not None:
            return self.peak_memory_bytes is not None
        return self.budget_mode == "peak"

    def replace(self, **changes: Any) -> RecomputeOptions:
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            valid = ", ".join(f.name for f in dataclasses.fields(self))
            raise ValueError(f"recompute_pass: unknown option(s) {unknown}; valid options: {valid}")
        return dataclasses.replace(self, **changes)

    def cache_key(self) -> str:
        """A stable digest of every setting (``repr`` of a frozen dataclass is deterministic)."""
        return hashlib.sha256(repr(self).encode()).hexdigest()


_UNITS = {
    "b": 1,
    **{f"{p}b": 1000**k for k, p in enumerate("kmgtp", start=1)},
    **{f"{p}ib": 1024**k for k, p in enumerate("kmgtp", start=1)},
}
_AMOUNT = re.compile(r"\s*((?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)
BYTES_VALID = (
    "None, a non-negative whole number of bytes (int, or a float such as 24e9), or a size "
    "string such as '24GiB', '24GB', '512MiB', '1.5GiB'"
)


def byte_count(option: str, value: object) -> int | None:
    """A byte cap in the units people write, as an int: ``24e9``, ``"24GiB"``, ``"24GB"``.

    Decimal (kB, MB, GB, TB, PB: powers of 1000) and binary (KiB, MiB, GiB, TiB, PiB: of
    1024) units, case-insensitive, the amount possibly fractional (``"1.5GiB"``); a
    fractional byte from a unit is rounded down (a cap). Bare numbers must be whole.
    """
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value >= 0:
            return int(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        if math.isfinite(value) and value >= 0 and float(value).is_integer():
            return int(value)
    elif isinstance(value, str) and (match := _AMOUNT.fullmatch(value)):
        amount, unit = decimal.Decimal(match.group(1)), match.group(2).lower() or "b"
        whole = amount == amount.to_integral_value()
        if unit in _UNITS and (unit != "b" or whole) and amount.adjusted() < 30:  # < 1e30: no giant ints
            return int(amount * _UNITS[unit])  # exact: Decimal, rounded down by int()
    raise _fail(option, value, BYTES_VALID)


def _plan_sizes(value: object) -> tuple[tuple[str, int], ...] | None:
    """``plan_sizes`` validated and in one spelling: sorted (source name, size) pairs."""
    valid = "None, or a mapping (or (name, size) pairs) from source names to positive int sizes"
    if value is None:
        return None
    try:
        pairs = list(value.items()) if isinstance(value, Mapping) else [tuple(p) for p in value]  # type: ignore[attr-defined]
    except TypeError:
        raise _fail("plan_sizes", value, valid) from None
    seen: dict[str, int] = {}
    for pair in pairs:
        if len(pair) != 2:
            raise _fail("plan_sizes", value, valid)
        name, size = pair
        integral = isinstance(size, numbers.Integral) and not isinstance(size, bool)
        if not isinstance(name, str) or not name or not integral or size < 1:
            raise _fail("plan_sizes", value, valid)
        if seen.get(name, size) != size:
            raise _fail("plan_sizes", value, f"one size per name ({name!r} given twice)")
        seen[name] = int(size)
    return tuple(sorted(seen.items())) or None
