"""Offload to host memory: the windows, the link, the schedule, its peak and the joint MILP.

Floor 4: may import ``memory``, ``graph``, ``solver``, ``torch_internals`` and ``cost_model``.
"""
