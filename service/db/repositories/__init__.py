"""Repositories: the only place that builds SQL, one module per aggregate (issue 27 §3).

Each repository wraps the unit of work's session. Repositories never commit; they ``flush``
when the caller needs generated values. Add a repository per aggregate (a module here, based on
:class:`.base.Repository`), re-export it below and expose it on
:class:`service.db.uow.UnitOfWork`.
"""

from __future__ import annotations

from service.db.repositories.api_keys import ApiKeyRepository
from service.db.repositories.audit import AuditRepository
from service.db.repositories.base import Repository
from service.db.repositories.classifiers import ModelRepository
from service.db.repositories.datasets import DatasetRepository
from service.db.repositories.evaluations import EvaluationRepository
from service.db.repositories.jobs import JobRepository
from service.db.repositories.ledger import LedgerRepository
from service.db.repositories.offers import OfferRepository
from service.db.repositories.remote_contributions import RemoteContributionRepository
from service.db.repositories.sites import SiteRepository
from service.db.repositories.studies import StudyRepository

__all__ = [
    "ApiKeyRepository",
    "AuditRepository",
    "DatasetRepository",
    "EvaluationRepository",
    "JobRepository",
    "LedgerRepository",
    "ModelRepository",
    "OfferRepository",
    "RemoteContributionRepository",
    "Repository",
    "SiteRepository",
    "StudyRepository",
]
