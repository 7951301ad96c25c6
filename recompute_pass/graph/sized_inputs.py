"""The step's inputs as a function of one size ``n``, and the ``plan_sizes`` for each ``n``.

``fit_longest`` is given ``make_inputs(n)``; the sizes that change with ``n`` (a sequence
length, a batch) are found by comparing the inputs at two sizes, and named as Dynamo names
them in the captured trace (``"L['idx'].size()[1]"``), so that the partitioner can plan at
any ``n`` from the one trace (``RecomputeOptions.plan_sizes``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from recompute_pass import torch_internals as ti

Dim = tuple[str, int]  # (argument name, dimension)


@dataclass(frozen=True)
class SizedInputs:
    make_inputs: Callable[[int], object]
    names: tuple[str, ...]  # the argument each input binds to
    varying: tuple[Dim, ...]  # the dimensions that change with n

    @staticmethod
    def of(model: Callable[..., object], make_inputs: Callable[[int], object], a: int, b: int) -> SizedInputs:
        """Which dimensions of ``make_inputs(n)`` change between ``n = a`` and ``n = b``."""
        first, second = _as_args(make_inputs(a)), _as_args(make_inputs(b))
        names = _argument_names(model, len(first))
        shapes_a, shapes_b = _shapes(names, first), _shapes(names, second)
        if shapes_a.keys() != shapes_b.keys():
            raise ValueError("make_inputs: the inputs at two sizes differ in number or rank")
        varying = tuple(dim for dim in shapes_a if shapes_a[dim] != shapes_b[dim])
        if not varying:
            raise ValueError(f"make_inputs: no input dimension differs between n={a} and n={b}")
        return SizedInputs(make_inputs, names, varying)

    def args(self, n: int) -> tuple[object, ...]:
        return _as_args(self.make_inputs(n))

    def sizes(self, n: int) -> dict[Dim, int]:
        """Every input dimension's size at ``n``."""
        return _shapes(self.names, self.args(n))

    def collides(self, n: int) -> bool:
        """Whether tracing at ``n`` could merge a varying size with another size: Dynamo
        gives equal sizes one symbol, and sizes 0 and 1 none."""
        sizes = self.sizes(n)
        moving = {sizes[d] for d in self.varying}
        fixed = {size for dim, size in sizes.items() if dim not in self.varying}
        return bool(moving & fixed) or any(s < 2 for s in moving)

    def plan_sizes(self, n: int, shape_env: ti.ShapeEnv | None) -> tuple[tuple[str, int], ...]:
        """``plan_sizes`` for ``n``: each varying dimension's source name in the trace, and
        its size at ``n``."""
        if shape_env is None:
            raise ValueError("the captured step has no shape symbols: was it traced dynamic=True?")
        sizes = self.sizes(n)
        named: dict[str, int] = {}
        for sym in ti.symbol_sources(shape_env):
            for source, argument, dim in ti.input_dim_of(shape_env, sym):
                if (argument, dim) in self.varying:
                    named[source] = sizes[(argument, dim)]
        missing = [d for d in self.varying if not any(d == (a, i) for a, i in self._traced(shape_env))]
        if missing:
            raise ValueError(f"make_inputs: the trace has no symbol for the varying dimension(s) {missing}")
        return tuple(sorted(named.items()))

    @staticmethod
    def _traced(shape_env: ti.ShapeEnv) -> list[Dim]:
        return [(a, i) for sym in ti.symbol_sources(shape_env) for _, a, i in ti.input_dim_of(shape_env, sym)]


def _as_args(inputs: object) -> tuple[object, ...]:
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _argument_names(model: Callable[..., object], count: int) -> tuple[str, ...]:
    """The parameter names positional inputs bind to: Dynamo names sizes after them."""
    target = model.forward if isinstance(model, torch.nn.Module) else model
    parameters = list(inspect.signature(target).parameters.values())
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < count:
        raise ValueError(f"make_inputs: {count} inputs, but the model takes {len(positional)} positionally")
    return tuple(p.name for p in positional[:count])


def _shapes(names: Sequence[str], args: Sequence[object]) -> dict[Dim, int]:
    return {
        (name, dim): int(size)
        for name, arg in zip(names, args, strict=True)
        if isinstance(arg, torch.Tensor)
        for dim, size in enumerate(arg.shape)
    }
