"""From raw columns to a checked design: data-independent preprocessing and random projections, a
design prepared once for several fits, and clipped per-example gradient sums with their floating-
point sensitivity."""
