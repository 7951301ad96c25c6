"""Make Inductor's own path ours: ``install(**options)`` and ``uninstall()``.

Trainers call ``torch.compile(model)`` themselves (HF ``Trainer``, ``accelerate``,
Lightning), some validating backend names against a fixed list, so ``backend="recompute"``
cannot reach them. Installing sets ``torch._inductor.config.custom_partitioner_fn`` to our
partitioner: every Inductor compile from then on, whoever calls it, is partitioned by us,
with the options, validation, compile patches and cache key of ``recompute_backend``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from torch import fx

from recompute_pass import torch_internals as ti
from recompute_pass.backend import RecomputeBackend
from recompute_pass.options import RecomputeOptions
from recompute_pass.partitioner import RecomputePartitioner
from recompute_pass.report import store as report_store
from recompute_pass.step import plans_steps, step_graph, trains

log = logging.getLogger(__name__)


class InstalledPartitioner(RecomputePartitioner):
    """Our partitioner as ``recompute_backend.with_options(**overrides)`` would run it:
    ``overrides`` over ``recompute_pass.config`` as it is at each compile (so its
    ``uuid()``, read by Inductor for each cache key, follows the config too)."""

    def __init__(self, overrides: dict[str, Any]) -> None:  # no super(): ``options`` is read live
        self.backend = RecomputeBackend(inductor=True, overrides=overrides)  # validates now
        report_store.watch()

    @property  # type: ignore[override]
    def options(self) -> RecomputeOptions:  # type: ignore[override]
        return self.backend.options()

    def __repr__(self) -> str:
        return f"InstalledPartitioner({self.backend.overrides})"


class Installation:
    """One ``install()``: a context manager that undoes it on exit."""

    def __init__(self, partitioner: InstalledPartitioner, previous: object) -> None:
        self.partitioner = partitioner
        self.previous = previous  # what ``custom_partitioner_fn`` was before

    def __enter__(self) -> InstalledPartitioner:
        return self.partitioner

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        _remove(self)


_installed: list[Installation] = []  # innermost last


def install(**options: Any) -> Installation:
    """Partition every Inductor compile with our partitioner from now on.

    ``options`` are those of ``recompute_backend.with_options`` (validated now; a bad one
    raises ``ValueError`` naming it); the rest is read from ``recompute_pass.config`` at each
    compile. Graphs compiled before the call keep their plan: Dynamo recompiles only on a
    guard failure, so call ``torch.compiler.reset()`` to partition them again. Usable as
    ``with recompute_pass.install(...):``, which restores the previous partitioner on exit.
    """
    partitioner = InstalledPartitioner(dict(options))
    installation = Installation(partitioner, ti.inductor_config.custom_partitioner_fn)
    ti.inductor_config.custom_partitioner_fn = partitioner
    _installed.append(installation)
    _ENTRY.install()
    log.debug("recompute_pass: installed %r as Inductor's partitioner", partitioner)
    return installation


def uninstall() -> None:
    """Undo the latest ``install()``: Inductor's partitioner is again what it was before
    (PyTorch's own, or whatever was set by hand). Nothing to undo: a no-op."""
    if _installed:
        _remove(_installed[-1])


def installed() -> InstalledPartitioner | None:
    """The partitioner the latest ``install()`` put in place, if still installed."""
    return _installed[-1].partitioner if _installed else None


def _step_graph(gm: fx.GraphModule, example_inputs: Sequence[object], config_patches: Any) -> Any:
    """Inductor's entry while installed: a graph of a step budget gets its plan with its
    step (``recompute_pass.step``), as through ``recompute_backend``; others compile as usual."""
    current = installed()
    if current is None:
        return None
    options = current.options
    if not (plans_steps(options) and trains(example_inputs)):
        return None
    return step_graph(gm, example_inputs, options=options, inductor=True, config_patches=config_patches)


_ENTRY = ti.InductorEntry(_step_graph)


def _remove(installation: Installation) -> None:
    if installation not in _installed:  # already undone (``uninstall()`` inside the block)
        return
    at = _installed.index(installation)
    _installed.pop(at)
    if not _installed:
        _ENTRY.remove()
    if at < len(_installed):  # undone out of order: the one installed over it inherits its past
        _installed[at].previous = installation.previous
        return
    if ti.inductor_config.custom_partitioner_fn is installation.partitioner:
        ti.inductor_config.custom_partitioner_fn = installation.previous
    else:
        log.warning(
            "recompute_pass: custom_partitioner_fn was replaced since install(); leaving %r in place",
            ti.inductor_config.custom_partitioner_fn,
        )
