"""Solving the ERM objectives: the exact minimiser (solvers) and the certified minimiser release of
objective perturbation (certified)."""
