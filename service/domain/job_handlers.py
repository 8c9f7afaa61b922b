"""Which use case runs a job of each kind (``Job.kind``), for
:func:`service.domain.jobs.execute_job`.

``fit`` jobs are run by :func:`service.domain.jobs.run_fit_job` itself; the study jobs are
registered here, where importing their modules cannot create an import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping

from service.domain.aggregations import run_aggregation_job
from service.domain.evaluations import EVALUATION_KIND, run_evaluation_job
from service.domain.federated import run_federated_job
from service.domain.jobs import JobHandler
from service.domain.tuning import TUNED_FIT_KIND, run_tuned_fit_job

__all__ = ["JOB_HANDLERS"]

JOB_HANDLERS: Mapping[str, JobHandler] = {
    "aggregate": run_aggregation_job,
    EVALUATION_KIND: run_evaluation_job,
    "federated": run_federated_job,
    TUNED_FIT_KIND: run_tuned_fit_job,
}
