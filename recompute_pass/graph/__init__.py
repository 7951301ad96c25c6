"""Stages 1-2: read AOTAutograd's joint graph and price it into a ``solver.Problem``.

Floor 2: may import ``solver``, ``torch_internals`` and ``cost_model``.
"""
