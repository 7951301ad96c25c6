"""The one full-size switch: ``RECOMPUTE_FULL=1`` runs every sweep at full size (more
models, budgets, hypothesis examples and Inductor compiles); unset or ``0``, the CI size.

Read here once, one way, for every test; any other value is an error, not a guess.
A case that only the full size runs is marked ``full_only(reason)``: ``tests/conftest.py``
skips it at the CI size and marks it ``slow`` (a full-size sweep is never the quick loop).
"""

from __future__ import annotations

import os

import pytest

_VALUE = os.environ.get("RECOMPUTE_FULL", "")
if _VALUE not in ("", "0", "1"):
    raise RuntimeError(f"RECOMPUTE_FULL={_VALUE!r}: set 1 for the full-size sweeps, or 0 (or leave it unset)")

FULL = _VALUE == "1"
"""Full-size sweeps (``RECOMPUTE_FULL=1``); CI runs the reduced form."""


def full_only(reason: str) -> pytest.MarkDecorator:
    """A case run only at full size: the reduced form covers it by default."""
    return pytest.mark.full_size(reason=reason)
