"""Inductor's and AOTAutograd's caches: where they live, whether they are off, and a
watch on AOTAutograd's lookups (a hit calls no partitioner)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
from torch._inductor import config as inductor_config
from torch._inductor.runtime.cache_dir_utils import cache_dir as _inductor_cache_dir

__all__ = [
    "caches_disabled",
    "inductor_cache_dir",
    "observe_autograd_cache",
]


def inductor_cache_dir() -> str:
    """Inductor's cache folder (``$TORCHINDUCTOR_CACHE_DIR``, else a per-user temp folder):
    where its FX-graph and AOTAutograd caches live, and so where what keys them belongs."""
    return _inductor_cache_dir()


def caches_disabled() -> bool:
    """``force_disable_caches`` (Inductor's or ``torch.compiler``'s): no cache read or written."""
    return bool(torch.compiler.config.force_disable_caches or inductor_config.force_disable_caches)


# AOTAutograd's cache skips the partitioner on a hit. Its lookup is watched (below) so that a
# hit can say which key it returned, and a miss which key the compile that follows saves under.
_autograd_cache_try_load = AOTAutogradCache.try_load
_autograd_cache_lookup = AOTAutogradCache._lookup
_looked_up = threading.local()  # .key: the key of this thread's latest lookup
_observers: list[Callable[[str | None, bool, Sequence[object]], None]] = []


def _lookup_observed(key: str, *args: Any, **kwargs: Any) -> Any:
    _looked_up.key = key
    return _autograd_cache_lookup(key, *args, **kwargs)


def _try_load_observed(mod: Any, args: list[Any], aot_config: Any, *rest: Any, **kwargs: Any) -> Any:
    _looked_up.key = None
    compiled_fn, aot_config = _autograd_cache_try_load(mod, args, aot_config, *rest, **kwargs)
    hit = compiled_fn is not None
    info = getattr(aot_config, "cache_info", None)
    key = _looked_up.key if hit else getattr(info, "cache_key", None)  # None: bypassed, nothing saved
    for observer in list(_observers):
        observer(key, hit, args)
    return compiled_fn, aot_config


def observe_autograd_cache(observer: Callable[[str | None, bool, Sequence[object]], None]) -> None:
    """Call ``observer(key, hit, fake_args)`` after each AOTAutograd cache lookup: on a hit
    with the key whose entry is returned (no partitioner runs), on a miss with the key the
    compile that follows is saved under (None when the cache is bypassed), whatever route
    reached AOTAutograd. Idempotent per observer."""
    if observer not in _observers:
        _observers.append(observer)
    if AOTAutogradCache.try_load is not _try_load_observed:
        AOTAutogradCache.try_load = staticmethod(_try_load_observed)  # type: ignore[method-assign]
        AOTAutogradCache._lookup = staticmethod(_lookup_observed)  # type: ignore[method-assign]
