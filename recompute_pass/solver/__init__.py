"""The optimisation problem and its solvers: Problem/Plan, min cuts, the hull, the strategies.

Floor 1 (the lowest): pure Python, numpy and scipy; imports no torch and nothing else of the package.
"""
