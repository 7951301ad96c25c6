"""Stage 4: the chosen plan as forward and backward graphs, offload ops included.

Floor 6: may import ``offloading``, ``graph``, ``solver``, ``torch_internals`` and ``cost_model``.
"""
