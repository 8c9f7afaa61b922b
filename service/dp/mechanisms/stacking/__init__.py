"""``stacking_samples`` (PST-S) and ``stacking_features`` (PST-F): privacy-preserving stacking
(Yao et al. 2019, seed 003 Algs. 2 and 3; docs/design.md §3).

Both mechanisms release a :class:`~service.dp.core.released.StackedModel`: K low-level linear
models and one high-level linear model on their meta-features. The base mechanism at every
level is PLR, i.e. PrivFit's ``objective_perturbation`` (Chaudhuri et al. 2011, seed 003
Alg. 1), called as a black box: each call is ε_call-DP with respect to the rows it is given.

Modules: :mod:`.options` (the API's options and defaults), :mod:`.plan` (what is public about
one fit, and its composition), :mod:`.levels` (the row split, the meta-features and what PST-S
and PST-F share: validation, planning, the run of the two levels), :mod:`.samples` (PST-S:
disjoint row blocks) and :mod:`.features` (PST-F: disjoint column groups, and PST-H's run on a
transfer target). Each module's docstring states its part of the privacy argument.
"""
