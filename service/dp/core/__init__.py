"""The shared core of PrivFit's DP numerics: the problem, calibration and result types (base), input
checks (validation), margin losses (losses), privacy costs and their composition (accounting), and
the released models (models)."""
