"""Fixtures shared by the test files."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from recompute_pass import torch_internals as ti


@pytest.fixture
def fallback_random() -> Iterator[None]:
    """Compiled dropout keeps eager's RNG calls (``native_dropout``) instead of Inductor's
    seed-based decomposition, so a compiled step draws eager's masks from the same seed.

    Files whose every test compares with eager use it for all of them:
    ``pytestmark = pytest.mark.usefixtures("fallback_random")``.
    """
    with ti.inductor_config.patch(fallback_random=True):
        yield
