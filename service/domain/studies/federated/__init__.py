"""Federated fits: a multiparty protocol across the datasets granted to a study (issue 6).

The coordinator of a study asks for ``noisy_average``, ``psgd``, ``admm`` or
``distributed_lasso`` over some of the datasets its members granted to the study
(:mod:`service.domain.studies.membership`); the protocol runs inside PrivFit, each site's local
steps over
that site's own rows only (:mod:`service.dp.federated`), and only the final model is released,
to every member of the study.

Order of a federated fit (the same ledger rules as a single fit, docs/design.md §2):

1. validate everything public with :func:`service.dp.federated.federated_calibrate` on the
   granted datasets' public sizes: an unknown protocol, bad parameters, a dataset that is not
   granted, a non-private protocol over a dataset that does not allow non-private use — each a
   422 before anything is spent;
2. one transaction: the queued job, and one charge per dataset of its own cost (parallel
   composition: the datasets hold different people), each within the dataset's remaining
   budget *and* the study's grant on it — all or none
   (:func:`service.domain.ledger.budgets.charge_many`); a
   shortfall is a 409 naming the dataset; commit before any noise is drawn;
   The job stores the protocol's typed plan (:mod:`service.dp.core.plan`; a fit with parties
   on nodes stores none: its plan needs the nodes' sizes, learnt when it runs);
3. the runner runs :func:`run_federated_job`, which runs the stored plan (re-deriving it only
   as a check: a different one fails the job with ``plan-mismatch`` before any site step).
   Progress is reported per round and a cancel is
   honoured at the next round; a failure in any site's step fails the whole job and releases
   nothing. The budget stays spent once the job has started; a job cancelled while queued is
   refunded (dataset and grant alike).

Granting a dataset to a study makes its row count visible to the study's coordinator and
members: every protocol's calibration depends on the sites' sizes (public under replace-one
neighbours), and the calibration is part of the released model's privacy record.

The package, one module per concern (issue 27): :mod:`.request` (the request and the quote's
costs), :mod:`.checks` (the checks that need no data: participants, calibration, costs),
:mod:`.submit` (quote and submit) and :mod:`.run` (the worker).
"""
