"""Reports that survive a warm cache.

A hit in AOTAutograd's cache returns the compiled forward and backward without calling the
partitioner, so nothing would say what the plan saves. Each report our partitioner
publishes while a compile that missed the cache runs is stored under that compile's
AOTAutograd cache key, in Inductor's cache folder; a later hit on the key, in this process
or another sharing the folder, publishes the stored reports again (``publish``: the log
line, ``capture_reports``, the trace artifact), equal to the first run's field by field.

The key is AOTAutograd's own, so it covers exactly what the cached plan depends on (the
graph, the inputs' metadata, the configs, our partitioner's ``uuid()``) on every route:
``recompute_backend``, ``install()``, ``custom_partitioner_fn`` set by hand. Nothing is
read or written under ``force_disable_caches``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from torch import fx

from recompute_pass import torch_internals as ti
from recompute_pass.report.publishing import publish
from recompute_pass.report.record import PartitionReport

log = logging.getLogger(__name__)

FORMAT = 1  # bump when the stored layout changes: old entries are then ignored


@dataclass
class _Pending:
    """The compile that missed the cache with ``key``: its fake mode identifies its
    partitions (the joint graph's values live in it)."""

    key: str
    fake_mode: weakref.ref[object]
    reports: list[PartitionReport] = field(default_factory=list)


_state = threading.local()  # .pending: the latest miss on this thread, or None


def watch() -> None:
    """Start watching AOTAutograd's cache (idempotent; our partitioners call it when made)."""
    ti.observe_autograd_cache(_observed)


def path_for(key: str) -> Path:
    """Where the reports of the compile cached under ``key`` are stored."""
    name = hashlib.sha256(key.encode()).hexdigest()
    return Path(ti.inductor_cache_dir()) / "recompute_pass" / "reports" / f"{name}.json"


def _observed(key: str | None, hit: bool, fake_args: Sequence[object]) -> None:
    try:
        _on_lookup(key, hit, fake_args)
    except Exception as error:  # a report is never worth failing the compile for
        log.warning("recompute_pass: the stored report of a cached compile failed: %s", error)


def _on_lookup(key: str | None, hit: bool, fake_args: Sequence[object]) -> None:
    _state.pending = None
    if key is None or ti.caches_disabled():
        return
    if not hit:
        fake_mode = ti.detect_fake_mode(list(fake_args))
        if fake_mode is not None:
            _state.pending = _Pending(key, weakref.ref(fake_mode))
        return
    reports = load(key)
    if reports:
        log.debug("recompute_pass: AOTAutograd cache hit; its %d stored report(s) follow", len(reports))
    for report in reports:
        publish(report)


def remember(fake_mode: object | None, report: PartitionReport) -> None:
    """Store ``report``, just published for a joint graph whose values live in
    ``fake_mode`` (``joint_fake_mode``), under the cache key its compile will be saved
    under, if that compile missed AOTAutograd's cache."""
    pending: _Pending | None = getattr(_state, "pending", None)
    if pending is None or fake_mode is None or ti.caches_disabled():
        return
    if pending.fake_mode() is not fake_mode:
        return  # not the compile that missed (another path, or no AOTAutograd cache)
    pending.reports.append(report)
    save(pending.key, pending.reports)


def joint_fake_mode(joint: fx.GraphModule) -> object | None:
    """The fake mode a joint graph's inputs live in (that of its compile)."""
    vals = [node.meta.get("val") for node in joint.graph.find_nodes(op="placeholder")]
    return ti.detect_fake_mode(vals)


def save(key: str, reports: Sequence[PartitionReport]) -> None:
    """Write atomically (two processes may compile the same graph at once); never fails
    the compile."""
    path = path_for(key)
    content = json.dumps({"format": FORMAT, "key": key, "reports": [r.to_json() for r in reports]})
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(handle, "w") as out:
            out.write(content)
        os.replace(temporary, path)
    except OSError as error:
        log.debug("recompute_pass: could not store the report for a cached compile: %s", error)
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def load(key: str) -> list[PartitionReport]:
    """The reports stored under ``key``; none when there are none or they cannot be read."""
    if ti.caches_disabled():
        return []
    path = path_for(key)
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT or data.get("key") != key:
            return []
        return [PartitionReport.from_json(text) for text in data["reports"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("recompute_pass: ignoring the unreadable stored report %s: %s", path, error)
        return []
