"""Reports that survive a warm cache (``recompute_pass.report.store``), without compiling:
the JSON round trip, and what a cache miss stores and a hit republishes. The same through
real compiles in two processes: ``tests/inductor/test_reports_outside.py``."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import recompute_pass
from recompute_pass import PartitionReport, capture_reports
from recompute_pass import torch_internals as ti
from recompute_pass.partitioner import _fallback_report
from recompute_pass.report import OffloadedValue
from recompute_pass.report import store as report_store


def _report(budget: float = 0.5) -> PartitionReport:
    weight = torch.randn(16, 16, requires_grad=True)
    torch.compiler.reset()
    fn = torch.compile(
        lambda x: torch.tanh(torch.sin(x @ weight) @ weight).sum(),
        backend=recompute_pass.recompute_eager_backend.with_options(memory_budget=budget),
    )
    with capture_reports() as reports:
        fn(torch.randn(4, 16)).backward()
    (report,) = reports
    return report


def test_a_report_survives_its_json() -> None:
    report = _report()
    assert report.saved and report.recomputed and report.frontier and report.peak_timeline
    assert report.gradients is not None
    offloaded = dataclasses.replace(
        report,
        offloaded=(OffloadedValue("x/mm", "[4, 16]", "float32", 256, 1e-6, 2e-6, 2.5e-6, 0.5e-6),),
        offload_frontier=((1000, 1e-5, 256), (900, 2e-5, 512)),
    )
    fallback = _fallback_report(recompute_pass.RecomputeOptions(), "RuntimeError: boom", "ab" * 32)
    for each in (report, offloaded, fallback):
        again = PartitionReport.from_json(each.to_json())
        assert again == each and again.to_text() == each.to_text() and again.summary() == each.summary()
        assert again.to_json() == each.to_json()
    with pytest.raises(ValueError):
        PartitionReport.from_json("[1, 2]")


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(report_store._state, "pending", None, raising=False)
    return tmp_path


def test_a_miss_stores_its_compiles_reports_and_a_hit_republishes_them(
    cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = _report(0.5), _report(0.0)
    mode, other = FakeTensorMode(), FakeTensorMode()
    with mode:
        args = [torch.empty(4, 16)]
    with other:
        unrelated = torch.empty(2)
    report_store._observed("key-a", False, args)  # a miss: the compile of these inputs follows
    report_store.remember(mode, first)
    report_store.remember(ti.detect_fake_mode([unrelated]), second)  # another compile's: not stored
    report_store.remember(mode, second)  # a second graph of the same compile (a subgraph body)
    assert report_store.path_for("key-a").is_relative_to(cache_dir)
    assert report_store.load("key-a") == [first, second]
    report_store._observed("key-b", False, [])  # a new lookup ends the window
    report_store.remember(mode, first)
    assert report_store.load("key-b") == []

    with caplog.at_level(logging.INFO, logger="recompute_pass"), capture_reports() as reports:
        report_store._observed("key-a", True, [])  # a hit: no partitioner runs
        report_store._observed("key-c", True, [])  # a hit on a compile we did not partition
    assert reports == [first, second]
    assert [r.getMessage() for r in caplog.records if r.name == "recompute_pass"] == [
        first.summary(),
        second.summary(),
    ]


def test_nothing_is_stored_or_read_when_caches_are_disabled(cache_dir: Path) -> None:
    report = _report()
    mode = FakeTensorMode()
    with mode:
        args = [torch.empty(3)]
    with ti.inductor_config.patch(force_disable_caches=True):
        report_store._observed("key", False, args)
        report_store.remember(mode, report)
    assert not report_store.path_for("key").exists()
    report_store._observed("key", False, args)
    report_store.remember(mode, report)
    assert report_store.load("key") == [report]
    with ti.inductor_config.patch(force_disable_caches=True), capture_reports() as reports:
        assert report_store.load("key") == []
        report_store._observed("key", True, [])
    assert reports == []


def test_an_unreadable_store_is_ignored_with_a_warning(
    cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = report_store.path_for("key")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="recompute_pass"):
        assert report_store.load("key") == []
    assert any("unreadable stored report" in r.getMessage() for r in caplog.records)
    path.write_text(json.dumps({"format": report_store.FORMAT, "key": "other", "reports": []}))
    assert report_store.load("key") == []  # a file for another key (a digest collision) is not ours
