"""Privately tuned fits (issue 16 item 2, issue 28 item 2): a fit whose ``regularization`` is a
list of candidates, ``{"candidates": [λ₁, …, λ_k]}``, and/or, for ``dp_sgd``, whose step size
``params.eta`` is one, ``{"candidates": [η₁, …, η_l]}``. The candidates are the grid Λ × H
(:func:`service.dp.analysis.selection.grid`; a single λ or η is an axis of one value).

``selection`` (``auto`` by default) chooses how, by
:func:`service.dp.analysis.selection_choice.choose_selection` from public quantities (k, n, d, ε, δ,
the smallest λ, whether the mechanism runs at δ = 0); the quote and the record show the method
and the reason.

With ``auto`` and a mechanism of :data:`.decision.RULE_MECHANISMS` (objective-type, pure
runs), the mechanism's automatic λ — the λ a fit with ``regularization: "auto"`` gets for the
request's mechanism, n, d, ε, δ, loss and task
(:func:`service.domain.fits.submit.resolve_regularization`) — is weighed against tuning
(docs/design.md §3, "Tuning that declines"): when random repetition's runs would cost the
excess-risk bound a factor κ > :data:`~service.dp.analysis.selection.MAX_COST_FACTOR`
(:func:`service.dp.analysis.selection_choice.rule_cost_factor`, public quantities only) no selection
runs and the automatic λ is fitted once on all rows at the request's (ε, δ)
(:class:`~service.dp.analysis.selection.RuleOnlyResult`); otherwise the automatic λ joins the
candidates (when absent and there is room) and the method is chosen for the longer list. The
decision is fixed at submission (the job's ``params.tuning_decision``, also the quote's
``calibration.tuning``) and the worker runs exactly it (a re-derivation that differs fails the
job, nothing released).

* ``cms`` — :func:`service.dp.analysis.selection.tune`: grid point i is fitted on the i-th of
  k + 1 disjoint parts at the request's full (ε, δ), the held-out part's error counts choose one
  with the exponential mechanism at ε. The total is the request's (ε, δ) by parallel
  composition (derivation in :mod:`service.dp.analysis.selection`).
* ``papernot_steinke`` / ``liu_talwar`` — random repetition
  (:mod:`service.dp.analysis.repetition`): a random number K of runs, each fitting a uniformly
  drawn grid point on **all** rows at (ε_t, 0) and scoring it by a noisy training error count at
  ε_s; the best run is released. ε₀ = ε_t + ε_s is solved so that the accounted total is ≤ the
  request's (ε, δ). K is not released (nor shown as progress).

In both cases only the chosen model is released and the request's (ε, δ) is charged with the
job, like a fit.

Validation before anything is spent: each list has 1 to
:data:`~service.dp.analysis.selection.MAX_CANDIDATES` distinct valid values, the grid has at most
:data:`~service.dp.analysis.selection.MAX_CANDIDATES` points, η candidates only for ``dp_sgd``,
and the mechanism calibrated for *every* grid point at the part size ⌊n/(k+1)⌋ (so a candidate
the mechanism cannot run at that size is a 422, not a failed job).

The package, one module per concern (issue 27): :mod:`.request` (the candidate lists and their
checks), :mod:`.decision` (what the tuned fit will do, fixed at submission), :mod:`.submit`
(quote and submit) and :mod:`.run` (the worker).
"""
