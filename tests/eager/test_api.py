"""The public surface: config, per-compile options, registered names, cache identity."""

from __future__ import annotations

import pytest
import torch

import recompute_pass
from recompute_pass import RecomputeOptions, RecomputePartitioner, capture_reports, config, recompute_backend


def test_config_attributes_are_validated_and_patch_restores() -> None:
    assert config.memory_budget == 1.0
    with config.patch(memory_budget=0.25, solver="mincut"):
        assert config.memory_budget == 0.25
        assert recompute_backend.options().solver == "mincut"
        with pytest.raises(ValueError, match="memory_budget"):
            config.memory_budget = 2.0
        assert config.memory_budget == 0.25  # a rejected value changes nothing
    assert config.options() == RecomputeOptions()


def test_config_module_assignment() -> None:
    try:
        recompute_pass.config.memory_budget = 0.5
        assert config.options().memory_budget == 0.5
    finally:
        recompute_pass.config.memory_budget = 1.0


def test_a_misspelt_config_option_is_refused() -> None:
    """As ``torch._inductor.config`` refuses one: set and ignored, it was a silent no-op."""
    with pytest.raises(AttributeError, match=r"memroy_budget.*memory_budget"):
        recompute_pass.config.memroy_budget = 0.0
    assert not hasattr(recompute_pass.config, "memroy_budget")
    assert config.options() == RecomputeOptions()


def test_an_unknown_inductor_option_is_refused_as_inductor_refuses_it() -> None:
    torch.compiler.reset()
    fn = torch.compile(lambda x: x.sin().sum(), backend="recompute", options={"no_such_option": 1})
    with pytest.raises(Exception, match="no_such_option"):
        fn(torch.randn(4, requires_grad=True))


def test_with_options_overrides_config_and_validates_eagerly() -> None:
    backend = recompute_backend.with_options(memory_budget=0.3)
    with config.patch(memory_budget=0.9, solver="selective"):
        options = backend.options()
    assert (options.memory_budget, options.solver) == (0.3, "selective")
    assert backend.with_options(solver="mincut").options().memory_budget == 0.3
    with pytest.raises(ValueError, match="solver"):
        recompute_backend.with_options(solver="fastest")
    with pytest.raises(ValueError, match="unknown option"):
        recompute_backend.with_options(budget=0.5)


def test_backend_is_registered_by_name() -> None:
    """The ``torch_dynamo_backends`` entry point: ``backend="recompute_eager"`` reaches us."""
    torch.compiler.reset()
    weight = torch.randn(8, 8, requires_grad=True)
    fn = torch.compile(lambda x: torch.tanh(x @ weight).sum(), backend="recompute_eager")
    with capture_reports() as reports:
        fn(torch.randn(4, 8)).backward()
    assert len(reports) == 1 and reports[0].fallback is None
    assert weight.grad is not None


def test_uuid_covers_every_option() -> None:
    base = RecomputePartitioner(RecomputeOptions())
    assert base.uuid() == RecomputePartitioner(RecomputeOptions()).uuid()
    variants = [
        {"memory_budget": 0.5},
        {"memory_budget_bytes": 1000},
        {"solver": "mincut"},
        {"device": "h100"},
        {"time_limit": 3.0},
        {"fallback": False},
        {"sync_plans": False},
    ]
    uuids = {RecomputePartitioner(RecomputeOptions(**v)).uuid() for v in variants}
    assert base.uuid() not in uuids and len(uuids) == len(variants)


def test_plan_digest_identifies_the_plan_and_stays_out_of_the_text() -> None:
    """Same graph and plan: same digest (the distributed tests compare it across processes);
    another plan: another digest. The text form pins decisions only."""
    torch.compiler.reset()
    weight = torch.randn(16, 16, requires_grad=True)

    def step(budget: float) -> recompute_pass.PartitionReport:
        torch.compiler.reset()
        fn = torch.compile(
            lambda x: torch.tanh(torch.sin(x @ weight) @ weight).sum(),
            # Saved bytes: budgets 0 and 1 give two plans (at peak budgets, one plan may fit both).
            backend=recompute_pass.recompute_eager_backend.with_options(
                memory_budget=budget, budget_mode="saved"
            ),
        )
        with capture_reports() as reports:
            fn(torch.randn(4, 16)).backward()
        (report,) = reports
        return report

    first, again, low = step(1.0), step(1.0), step(0.0)
    assert len(first.plan_digest) == 64 and first.plan_digest == again.plan_digest
    assert [s.name for s in first.saved] != [s.name for s in low.saved]
    assert low.plan_digest != first.plan_digest
    assert first.plan_digest not in first.to_text()
    assert (first.rank, first.world_size) == (0, 1) and "rank" not in first.summary()


def test_install_makes_inductors_partitioner_ours_with_the_backends_options() -> None:
    """``install`` is ``recompute_backend.with_options`` for trainers that call
    ``torch.compile(model)``: same validation, options over the config, same cache key."""
    from recompute_pass import torch_internals as ti

    by_hand = RecomputePartitioner(RecomputeOptions(solver="mincut"))
    with ti.inductor_config.patch(custom_partitioner_fn=by_hand):
        with recompute_pass.install(memory_budget=0.3) as installed:
            assert ti.inductor_config.custom_partitioner_fn is installed
            assert isinstance(installed, RecomputePartitioner)
            expected = recompute_backend.with_options(memory_budget=0.3).partitioner()
            assert installed.options == expected.options and installed.uuid() == expected.uuid()
            with config.patch(solver="selective"):  # the rest is the config's at compile time
                assert installed.options.solver == "selective"
                assert installed.uuid() != expected.uuid()
            recompute_pass.install(memory_budget=0.0)  # nested: undone first
            assert ti.inductor_config.custom_partitioner_fn.options.memory_budget == 0.0
            recompute_pass.uninstall()
            assert ti.inductor_config.custom_partitioner_fn is installed
        assert ti.inductor_config.custom_partitioner_fn is by_hand  # what was there before
        recompute_pass.uninstall()  # nothing installed: nothing to undo
        assert ti.inductor_config.custom_partitioner_fn is by_hand
        installation = recompute_pass.install()
        recompute_pass.uninstall()
        assert ti.inductor_config.custom_partitioner_fn is by_hand
        installation.__exit__(None, None, None)  # already undone: changes nothing
        assert ti.inductor_config.custom_partitioner_fn is by_hand
    assert recompute_pass.install.__module__ == "recompute_pass.installation"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"memory_budget": 1.5}, "memory_budget"),
        ({"solver": "fastest"}, "solver"),
        ({"peak_memory_bytes": -1}, "peak_memory_bytes"),
        ({"budget": 0.5}, "unknown option"),
    ],
)
def test_install_rejects_bad_options_and_changes_nothing(options: dict[str, object], named: str) -> None:
    from recompute_pass import torch_internals as ti

    before = ti.inductor_config.custom_partitioner_fn
    with pytest.raises(ValueError, match=named):
        recompute_pass.install(**options)
    assert ti.inductor_config.custom_partitioner_fn is before
    assert recompute_pass.installed() is None


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("24GiB", 24 * 2**30),
        ("24GB", 24 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1.5GiB", 3 * 2**29),
        ("1.3GiB", int(1.3 * 2**30)),  # a fractional byte is rounded down
        ("64 kb", 64_000),
        ("1024", 1024),
        ("2e3", 2000),
        (24e9, 24 * 10**9),
        (1000, 1000),
        (0, 0),
    ],
)
@pytest.mark.parametrize("option", ["peak_memory_bytes", "memory_budget_bytes"])
def test_byte_budgets_take_the_units_people_write(option: str, given: object, stored: int) -> None:
    options = RecomputeOptions(**{option: given})
    value = getattr(options, option)
    assert value == stored and type(value) is int
    # One size, one spelling: the cache key does not depend on how the size was written.
    assert options.cache_key() == RecomputeOptions(**{option: stored}).cache_key()
    assert getattr(recompute_backend.with_options(**{option: given}).options(), option) == stored


@pytest.mark.parametrize(
    "given",
    [
        -1,
        -1.0,
        float("nan"),
        float("inf"),
        1.5,
        True,
        "garbage",
        "",
        "1.5",
        "1.5B",
        "-1GB",
        "nan",
        "inf",
        "24 GiBs",
        "24Gb/s",
        "1e40GB",
        [24],
        "24 GiB GiB",
    ],
)
@pytest.mark.parametrize("option", ["peak_memory_bytes", "memory_budget_bytes"])
def test_bad_byte_budgets_are_refused_naming_the_option(option: str, given: object) -> None:
    with pytest.raises(ValueError, match=f"invalid {option}=.*'24GiB'"):
        RecomputeOptions(**{option: given})
    with pytest.raises(ValueError, match=option):
        config.patch(**{option: given}).__enter__()
