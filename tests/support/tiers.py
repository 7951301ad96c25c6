"""The test tiers: a folder each, whose ``conftest.py`` marks every test in it.

- ``unit/``: no compile: costs, solvers, layouts and hand-built graphs.
- ``eager/``: our partitioner through Dynamo and AOTAutograd with the eager backend (no
  code generation), and what runs in other processes without Inductor.
- ``inductor/``: Inductor's lowering or code generation; ``slow``.

The quick loop is ``pytest -m "not slow"``: the unit and eager tiers, less the full-size
cases and the few eager tests marked ``slow`` for what they spawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest


def mark_tier(items: Sequence[pytest.Item], folder: Path, *marks: pytest.MarkDecorator) -> None:
    """Give every test under ``folder`` the tier's ``marks``."""
    for item in items:
        if folder in item.path.parents:
            for mark in marks:
                item.add_marker(mark)
