"""Log-once helper: a graph can hold thousands of nodes of one odd op; one line is enough."""

from __future__ import annotations

import functools
import logging


@functools.cache
def log_once(logger: logging.Logger, level: int, reason: str, op: str, detail: str = "") -> None:
    """Log ``reason`` for ``op`` the first time this combination is seen.

    The cache is the package's only state; tests reset it with ``log_once.cache_clear()``.
    """
    logger.log(level, "cost_model: %s for %s%s", reason, op, f" ({detail})" if detail else "")
