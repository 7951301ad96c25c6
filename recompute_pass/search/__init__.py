"""Stage 3: the budget in bytes or peak, the chosen plan (``decide``) and the peak search.

Floor 5: may import ``offloading``, ``memory``, ``graph``, ``solver``, ``options`` and ``cost_model``.
"""
