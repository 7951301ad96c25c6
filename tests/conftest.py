"""Fixtures and markers shared by every tier.

The tiers are folders, each with a ``conftest.py`` that marks every test in it:
``unit/`` (no compile), ``eager/`` (our partitioner through AOTAutograd, no code
generation) and ``inductor/`` (Inductor's lowering or code generation; ``slow``). Helpers
all tiers import are in ``support/``. Here, a case marked ``full_only`` (``support.full_size``)
is skipped at the CI size and marked ``slow``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from recompute_pass import torch_internals as ti
from recompute_pass.step import PLANNER
from tests.support.full_size import FULL


def pytest_itemcollected(item: pytest.Item) -> None:
    marker = item.get_closest_marker("full_size")
    if marker is None:
        return
    item.add_marker(pytest.mark.slow)
    if not FULL:
        item.add_marker(pytest.mark.skip(reason=f"RECOMPUTE_FULL=1 only: {marker.kwargs['reason']}"))


@pytest.fixture(scope="module", autouse=True)
def _steps_forgotten_after_each_module() -> Iterator[None]:
    """A module's compiled graphs waiting for a step plan do not wait into the next
    module's tests (the step planner is one per process)."""
    yield
    PLANNER.reset()


@pytest.fixture
def fallback_random() -> Iterator[None]:
    """Compiled dropout keeps eager's RNG calls (``native_dropout``) instead of Inductor's
    seed-based decomposition, so a compiled step draws eager's masks from the same seed.

    Files whose every test compares with eager use it for all of them:
    ``pytestmark = pytest.mark.usefixtures("fallback_random")``.
    """
    with ti.inductor_config.patch(fallback_random=True):
        yield
