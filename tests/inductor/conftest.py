"""The Inductor tier: lowering or code generation; slow (``support/tiers.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tiers import mark_tier


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, pytest.mark.inductor, pytest.mark.slow)
