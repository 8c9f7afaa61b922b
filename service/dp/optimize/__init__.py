"""Solving the ERM objectives: the exact minimiser (solvers), the certified minimiser release of
objective perturbation (certified), and when that release can fail (certified_failure)."""
