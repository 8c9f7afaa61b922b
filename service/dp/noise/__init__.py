"""Randomness and exact noise: uniform draws and the release grid (draws), exact discrete
Laplace/Gaussian samplers (discrete), IEEE-754 rounding bounds (rounding), and the exact lattice
release of noisy vectors (lattice, by layer)."""
