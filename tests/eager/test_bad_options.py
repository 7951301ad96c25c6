"""Bad options fail where the user sets them, with a message naming the option and what is valid.

Every way of setting an option is checked (the options record, the global config as an
attribute and as a context manager, a backend's ``with_options``), and a rejected value
leaves the previous settings in place.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from recompute_pass import RecomputeOptions, config, recompute_backend, recompute_eager_backend


def _set_attribute(name: str, value: Any) -> None:
    setattr(config, name, value)


def _patch(name: str, value: Any) -> None:
    with config.patch(**{name: value}):
        pytest.fail("config.patch accepted an invalid value")


SETTERS: dict[str, Callable[[str, Any], object]] = {
    "options": lambda name, value: RecomputeOptions(**{name: value}),
    "config_attribute": _set_attribute,
    "config_patch": _patch,
    "with_options": lambda name, value: recompute_backend.with_options(**{name: value}),
    "eager_with_options": lambda name, value: recompute_eager_backend.with_options(**{name: value}),
}

# (option, bad value, words the message must contain)
BAD = [
    ("memory_budget", -0.1, "[0, 1]"),
    ("memory_budget", 1.7, "[0, 1]"),
    ("memory_budget", math.nan, "[0, 1]"),
    ("memory_budget", math.inf, "[0, 1]"),
    ("memory_budget", "half", "[0, 1]"),
    ("memory_budget", None, "[0, 1]"),
    ("memory_budget", True, "[0, 1]"),
    ("memory_budget", np.float32("nan"), "[0, 1]"),
    ("memory_budget_bytes", -1, "non-negative whole number of bytes"),
    ("memory_budget_bytes", 1.5, "non-negative whole number of bytes"),
    ("memory_budget_bytes", "1 gigabyte", "size string"),
    ("memory_budget_bytes", True, "non-negative whole number of bytes"),
    ("solver", "fastest", "milp"),
    ("solver", "MILP", "milp"),
    ("solver", None, "milp"),
    ("device", "tpu", "auto"),
    ("device", "H100", "auto"),
    ("device", 0, "auto"),
    ("time_limit", 0, "positive"),
    ("time_limit", -1.0, "positive"),
    ("time_limit", math.nan, "positive"),
    ("time_limit", math.inf, "finite"),
    ("fallback", "yes", "True or False"),
    ("sync_plans", "auto", "True or False"),
    ("sync_plans", 1, "True or False"),
]


@pytest.mark.parametrize("setter", sorted(SETTERS))
@pytest.mark.parametrize(("option", "value", "valid"), BAD, ids=lambda v: repr(v))
def test_bad_option_raises_value_error_naming_it(option: str, value: Any, valid: str, setter: str) -> None:
    before = config.options()
    with pytest.raises(ValueError) as info:
        SETTERS[setter](option, value)
    message = str(info.value)
    assert f"invalid {option}=" in message
    assert valid in message
    assert config.options() == before  # nothing half-applied


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("memory_budget", 0),
        ("memory_budget", 1),
        ("memory_budget", 0.5),
        ("memory_budget", np.float64(0.25)),
        ("memory_budget", Fraction(1, 3)),
        ("memory_budget_bytes", 0),
        ("memory_budget_bytes", np.int64(4096)),
        ("memory_budget_bytes", 1024.0),  # a whole float: stored as the int it is
        ("memory_budget_bytes", "1GB"),
        ("solver", "mincut"),
        ("device", "h100"),
        ("time_limit", 0.5),
        ("sync_plans", False),
    ],
    ids=repr,
)
def test_edge_values_are_accepted(option: str, value: Any) -> None:
    options = RecomputeOptions(**{option: value})
    if option == "memory_budget":
        # Normalised to a float: the same budget gives the same cache key however it is spelled.
        assert type(options.memory_budget) is float and options.memory_budget == float(value)
    elif option == "memory_budget_bytes":
        # Normalised to an int of bytes, whatever the spelling: one cache key per size.
        expected = 10**9 if value == "1GB" else int(value)
        assert type(options.memory_budget_bytes) is int and options.memory_budget_bytes == expected
    else:
        assert getattr(options, option) == value


def test_unknown_option_names_the_valid_ones() -> None:
    for make in (
        lambda: recompute_backend.with_options(budget=0.5),
        lambda: config.patch(memory_budjet=0.5).__enter__(),
    ):
        with pytest.raises(ValueError, match=r"unknown option.*valid options: memory_budget"):
            make()
    with pytest.raises(AttributeError):
        _ = config.budget


def test_every_solver_and_device_name_listed_as_valid_is_accepted() -> None:
    from recompute_pass.options import DEVICES, SOLVERS

    for solver in SOLVERS:
        assert RecomputeOptions(solver=solver).solver == solver
    for device in DEVICES:
        assert RecomputeOptions(device=device).device == device
    assert len(SOLVERS) >= 5 and "auto" in DEVICES
