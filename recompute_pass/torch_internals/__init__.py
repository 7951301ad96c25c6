"""Every private PyTorch name the ``recompute_pass`` package uses, behind one import:
``from recompute_pass import torch_internals as ti``, then ``ti.<name>``
(``cost_model/torch_internals.py`` is the cost model's).

Floor 0 (below every other): imports torch alone, nothing else of the package.

Torch internals move between releases; a torch upgrade should touch this package only.
Checked against torch 2.13. ``tests/eager/test_torch_internals.py`` fails loudly if a name
disappears. A new name goes in the module of its area, and is exported here:

- ``aot``: AOTAutograd: the joint graph's bookkeeping, PyTorch's partitioners, the eager route;
- ``caches``: Inductor's and AOTAutograd's caches;
- ``compiling``: Inductor's compile of a partitioned graph, ``torch.compile``'s options, Dynamo's config;
- ``distributed``: the default process group;
- ``inductor``: Inductor's lowering, scheduler and memory plan; the ``store`` op's lowering;
- ``lazy_modules``: lazy GraphModules;
- ``offload_ops``: the activation-offload ops;
- ``ops``: operator schemas;
- ``rng``: replaying random draws;
- ``watching``: the running step: backward passes watched, a CPU memory profile, Dynamo's
  contexts kept for a later compile;
- ``shapes``: symbolic shapes and fake tensors;
- ``tracing``: the structured trace.
"""

from __future__ import annotations

from recompute_pass.torch_internals import (
    aot,
    caches,
    compiling,
    distributed,
    inductor,
    lazy_modules,
    offload_ops,
    ops,
    rng,
    shapes,
    tracing,
    watching,
)
from recompute_pass.torch_internals.aot import *
from recompute_pass.torch_internals.caches import *
from recompute_pass.torch_internals.compiling import *
from recompute_pass.torch_internals.distributed import *
from recompute_pass.torch_internals.inductor import *
from recompute_pass.torch_internals.lazy_modules import *
from recompute_pass.torch_internals.offload_ops import *
from recompute_pass.torch_internals.ops import *
from recompute_pass.torch_internals.rng import *
from recompute_pass.torch_internals.shapes import *
from recompute_pass.torch_internals.tracing import *
from recompute_pass.torch_internals.watching import *

# Each area lists its names in its own ``__all__``; the package exports them all.
__all__ = [
    *aot.__all__,
    *caches.__all__,
    *compiling.__all__,
    *distributed.__all__,
    *inductor.__all__,
    *lazy_modules.__all__,
    *offload_ops.__all__,
    *ops.__all__,
    *rng.__all__,
    *watching.__all__,
    *shapes.__all__,
    *tracing.__all__,
]
