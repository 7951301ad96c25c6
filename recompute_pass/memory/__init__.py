"""Peak predictors: the graph walk (liveness, plan_peak) and Inductor's memory plan.

Floor 3: may import ``graph``, ``solver``, ``torch_internals`` and ``cost_model``.
"""
