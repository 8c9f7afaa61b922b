"""PrivFit benchmarks: speed and accuracy against peers, and reproductions of the papers' plots.

Run the scripts as modules from the repository root (see ``benchmarks/README.md``).
"""
