"""Cost model for joint forward/backward graphs: FLOPs, bytes and runtime per node.

``node_cost(node)`` returns a :class:`NodeCost` whose ``flops``/``bytes_in``/``bytes_out``
are sympy expressions over the graph's shape symbols (integers for static shapes);
``NodeCost.evaluate(SizeHints.from_graph(gm))`` turns them into ints without adding guards;
``estimate_runtime(cost, "h100")`` applies a roofline under a :class:`DeviceProfile`;
``measure_op_times(nodes, hints, profile)`` times the ops instead (cached on disk).

Decisions (details in each module's docstring):

- ``flops`` equals ``FlopCounterMode`` for every op in ``torch.utils.flop_counter``'s
  registry (the registry's own formulas are called on sympy shapes). Beyond it: CPU
  flash attention and the other attention kernels it misses, a few extra GEMMs, and one
  FLOP per element for pointwise/random ops (output) and reductions (input), which
  FlopCounterMode counts as 0 (``flops``).
- causal masking and flex block sparsity only lower ``effective_flops`` (``attention``).
- bytes are storage spans, views cost nothing (``storage``, ``node_cost``).
- fp32 GEMMs are costed at the fp32 rate unless a profile enables TF32 (``device``).
- unknown ops, missing ``meta["val"]``, unbacked SymInts: ``known=False`` fallbacks,
  logged once, never an exception (``node_cost``); unbacked symbols evaluate at
  ``SizeHints.unbacked_hint`` = 4096 (``hints``).

The package imports only torch, sympy and the standard library, and knows nothing of
partitioning. Every private torch name it uses comes through ``torch_internals``.
"""

from .calibrate import calibrate
from .device import PROFILES, DeviceProfile, get_profile
from .hints import DEFAULT_UNBACKED_HINT, SizeHints
from .kinds import MATRIX_KINDS, OpKind, base_name, classify, is_constructor
from .measure import OpTimes, ProfilingStats, default_cache_dir, measure_op_times
from .node_cost import ConcreteCost, NodeCost, node_cost
from .runtime import estimate_runtime
from .storage import tensor_bytes
from .workspace import tensor_workspace_bytes, unmodelled_workspace, workspace_bytes

__all__ = [
    "DEFAULT_UNBACKED_HINT",
    "MATRIX_KINDS",
    "PROFILES",
    "ConcreteCost",
    "DeviceProfile",
    "NodeCost",
    "OpKind",
    "OpTimes",
    "ProfilingStats",
    "SizeHints",
    "base_name",
    "calibrate",
    "classify",
    "default_cache_dir",
    "estimate_runtime",
    "get_profile",
    "is_constructor",
    "measure_op_times",
    "node_cost",
    "tensor_bytes",
    "tensor_workspace_bytes",
    "unmodelled_workspace",
    "workspace_bytes",
]
