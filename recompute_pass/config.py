"""The one global setting of the project: default ``RecomputeOptions``.

Use it as a module: ``recompute_pass.config.memory_budget = 0.5`` (validated on
assignment) or ``with recompute_pass.config.patch(memory_budget=0.3): ...``. A backend made
by ``recompute_backend.with_options(...)`` overrides these per compile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import types
from collections.abc import Iterator
from typing import Any

from recompute_pass.options import RecomputeOptions

_FIELDS = tuple(f.name for f in dataclasses.fields(RecomputeOptions))
_current = RecomputeOptions()


def options() -> RecomputeOptions:
    """The current global settings, as an immutable snapshot."""
    return _current


@contextlib.contextmanager
def patch(**changes: Any) -> Iterator[RecomputeOptions]:
    """Temporarily change global settings; validated before anything changes."""
    global _current
    previous, _current = _current, _current.replace(**changes)
    try:
        yield _current
    finally:
        _current = previous


class _ConfigModule(types.ModuleType):
    """Routes ``config.<option>`` reads and writes to the validated snapshot."""

    def __getattr__(self, name: str) -> Any:
        if name in _FIELDS:
            return getattr(_current, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        global _current
        if name in _FIELDS:
            _current = _current.replace(**{name: value})
        elif name in self.__dict__ or name.startswith("__"):  # the module's own (a mock, say)
            super().__setattr__(name, value)
        else:  # a misspelt option would otherwise be set, and ignored
            options = ", ".join(_FIELDS)
            raise AttributeError(f"recompute_pass.config has no option {name!r}; options: {options}")


sys.modules[__name__].__class__ = _ConfigModule
