"""The distributed tier: spawned gloo process groups (2 ranks), eager or Inductor inside;
slow (``support/tiers.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tiers import mark_tier


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, pytest.mark.distributed, pytest.mark.slow)
