"""The test tiers: a folder each, whose ``conftest.py`` marks every test in it.

- ``unit/``: no compile: costs, solvers, layouts and hand-built graphs.
- ``eager/``: our partitioner through Dynamo and AOTAutograd with the eager backend (no
  code generation), and what runs in other processes without Inductor.
- ``inductor/``: Inductor's lowering or code generation; ``slow``.
- ``distributed/``: spawned gloo process groups (eager or Inductor inside); ``slow``.

The quick loop is ``pytest -m "not slow"``: the unit and eager tiers, less their
full-size cases and two kinds marked ``slow`` by hand in ``eager/``: a test that starts
fresh interpreters, and the Inductor cases of PyTorch's ported suite (``pytorch_ac``,
kept in upstream's one file).
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
