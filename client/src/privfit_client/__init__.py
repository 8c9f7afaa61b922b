"""Python client for PrivFit: typed calls, retries that never charge a budget twice, jobs you
can wait on, and typed errors.

    from privfit_client import Client

    with Client("http://127.0.0.1:8000", "pf_...") as pf:
        job = pf.fit(dataset_id, epsilon=1.0, regularization=1e-3)
        model = job.wait(progress=True).model()
"""

from privfit_client._http import RetryPolicy
from privfit_client._version import __version__
from privfit_client.aio import AsyncClient, AsyncJob
from privfit_client.client import PREDICT_BATCH, Client
from privfit_client.errors import (
    BudgetExhausted,
    Conflict,
    Forbidden,
    JobFailed,
    NotFound,
    PayloadTooLarge,
    PrivFitError,
    ProblemError,
    RateLimited,
    ServerError,
    Unauthenticated,
    ValidationFailed,
)
from privfit_client.jobs import Job

__all__ = [
    "PREDICT_BATCH",
    "AsyncClient",
    "AsyncJob",
    "BudgetExhausted",
    "Client",
    "Conflict",
    "Forbidden",
    "Job",
    "JobFailed",
    "NotFound",
    "PayloadTooLarge",
    "PrivFitError",
    "ProblemError",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "Unauthenticated",
    "ValidationFailed",
    "__version__",
]
