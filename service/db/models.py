"""ORM models: one class per table, singular snake_case table names.

Models hold data only; every query lives in :mod:`service.db.repositories`. Changing a model
needs a migration (see README, "Migrations"); ``tests/integration/db`` fails on any drift.
"""

from __future__ import annotations

import unicodedata
import uuid
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from service.db.base import Base, UTCDateTime, utcnow

__all__ = [
    "ApiKey",
    "AuditEvent",
    "Dataset",
    "DatasetChunk",
    "Job",
    "KeyRole",
    "LedgerCharge",
    "Model",
    "Site",
    "Study",
    "StudyContribution",
    "StudyMember",
    "new_id",
]

KeyRole = Literal["admin", "site"]

#: Auto-incrementing 64-bit key (SQLite only auto-increments an INTEGER PRIMARY KEY).
BigIntId = BigInteger().with_variant(Integer(), "sqlite")


def new_id() -> str:
    """A random 128-bit identifier as 32 lowercase hex digits."""
    return uuid.uuid4().hex


#: Room for ``site_name_key``: NFKC expands one character to at most 18 (U+FDFA), so a long
#: name of such characters can outgrow it; the domain refuses those names (422).
SITE_NAME_KEY_LENGTH = 1000


#: Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties): characters that
#: render as nothing (zero-width spaces and joiners, soft hyphen, variation selectors, ...).
_DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)


def _is_default_ignorable(ch: str) -> bool:
    point = ord(ch)
    return any(low <= point <= high for low, high in _DEFAULT_IGNORABLE)


def site_name_key(name: str) -> str:
    """The form under which site names must be unique: Unicode's NFKC_Casefold — invisible
    (default-ignorable) characters dropped, NFKC, case-folded, NFKC again — so names that
    look alike ("St Mary", "ST MARY", "Ｓｔ Ｍａｒｙ", "St Ma\u200bry") collide."""
    visible = "".join(ch for ch in name if not _is_default_ignorable(ch))
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", visible).casefold())


class Site(Base):
    """An organisation using the service (a hospital, a bank, a research site)."""

    __tablename__ = "site"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    #: The name after NFKC normalisation and case folding: two sites whose names look the same
    #: ("St Mary", "ST MARY", "Ｓｔ Ｍａｒｙ") cannot both exist.
    name_key: Mapped[str] = mapped_column(
        String(SITE_NAME_KEY_LENGTH),
        unique=True,
        default=lambda context: site_name_key(context.get_current_parameters()["name"]),
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: Set once when the admin deactivates the site: its keys are revoked and none is issued
    #: again; its data is kept unchanged.
    deactivated_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)

    api_keys: Mapped[list[ApiKey]] = relationship(back_populates="site", lazy="raise")


class ApiKey(Base):
    """An API key. Only its public prefix and the SHA-256 of the whole key are stored.

    ``role = 'admin'`` keys belong to no site; at most one admin key is active at a time (the
    partial unique index also settles two processes racing to create the first one).
    """

    __tablename__ = "api_key"
    __table_args__ = (
        CheckConstraint("role IN ('admin', 'site')", name="role_known"),
        CheckConstraint(
            "(role = 'admin' AND site_id IS NULL) OR (role = 'site' AND site_id IS NOT NULL)",
            name="site_matches_role",
        ),
        Index(
            "uq_api_key_one_active_admin",
            "role",
            unique=True,
            sqlite_where=text("role = 'admin' AND revoked_at IS NULL"),
            postgresql_where=text("role = 'admin' AND revoked_at IS NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    site_id: Mapped[str | None] = mapped_column(
        ForeignKey("site.id", ondelete="CASCADE"), index=True
    )
    role: Mapped[str] = mapped_column(String(16))
    prefix: Mapped[str] = mapped_column(String(16), unique=True)
    key_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    site: Mapped[Site | None] = relationship(back_populates="api_keys", lazy="raise")

    @property
    def active(self) -> bool:
        """True until the key is revoked."""
        return self.revoked_at is None


class AuditEvent(Base):
    """An append-only record of a security-relevant event. Never holds a secret."""

    __tablename__ = "audit_event"
    __table_args__ = (
        CheckConstraint("outcome IN ('success', 'failure')", name="outcome_known"),
        Index("ix_audit_event_subject", "subject_type", "subject_id"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    action: Mapped[str] = mapped_column(String(64), index=True)
    outcome: Mapped[str] = mapped_column(String(16))
    actor_role: Mapped[str | None] = mapped_column(String(16))
    actor_site_id: Mapped[str | None] = mapped_column(String(32))
    key_prefix: Mapped[str | None] = mapped_column(String(16))
    subject_type: Mapped[str | None] = mapped_column(String(32))
    subject_id: Mapped[str | None] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(64))
    client_ip: Mapped[str | None] = mapped_column(String(64))
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Dataset(Base):
    """A site's uploaded dataset: public spec, size, budget caps and amounts spent.

    Budget amounts are integers in ledger units (:mod:`service.domain.ledger.units`: 1e-9 ε,
    1e-15 δ). The CHECK constraints are the backstop of the ledger's conditional UPDATE:
    ``0 <= spent <= cap`` holds on both databases whatever the application does.
    The content lives in ``dataset_chunk`` rows; deleting a dataset removes them and sets
    ``deleted_at`` while the row and its ledger stay.
    """

    __tablename__ = "dataset"
    __table_args__ = (
        CheckConstraint(
            "epsilon_spent_units >= 0 AND epsilon_spent_units <= epsilon_cap_units",
            name="epsilon_within_cap",
        ),
        CheckConstraint(
            "delta_spent_units >= 0 AND delta_spent_units <= delta_cap_units",
            name="delta_within_cap",
        ),
        CheckConstraint("n_rows >= 0 AND n_features >= 1", name="shape_valid"),
        Index("ix_dataset_owner_created", "owner_site_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    owner_site_id: Mapped[str] = mapped_column(ForeignKey("site.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    preprocessing: Mapped[dict[str, Any]] = mapped_column(JSON)
    feature_names: Mapped[list[str]] = mapped_column(JSON)
    n_rows: Mapped[int] = mapped_column(BigInteger)
    n_features: Mapped[int] = mapped_column(Integer)
    allow_non_private: Mapped[bool] = mapped_column(Boolean, default=False)
    epsilon_cap_units: Mapped[int] = mapped_column(BigInteger)
    delta_cap_units: Mapped[int] = mapped_column(BigInteger)
    epsilon_spent_units: Mapped[int] = mapped_column(BigInteger, default=0)
    delta_spent_units: Mapped[int] = mapped_column(BigInteger, default=0)
    ingest: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class DatasetChunk(Base):
    """One compressed block of a dataset's encoded rows, readable by every worker process."""

    __tablename__ = "dataset_chunk"
    __table_args__ = (CheckConstraint("n_rows >= 0", name="n_rows_non_negative"),)

    dataset_id: Mapped[str] = mapped_column(
        ForeignKey("dataset.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    n_rows: Mapped[int] = mapped_column(Integer)
    payload: Mapped[bytes] = mapped_column(LargeBinary)


class Job(Base):
    """A unit of background work (a fit), its status, progress and outcome.

    ``UNIQUE(owner_site_id, idempotency_key)`` makes a retried request find the first job, and
    lets exactly one of two racing identical requests commit.
    """

    __tablename__ = "job"
    __table_args__ = (
        CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')",
            name="status_known",
        ),
        CheckConstraint("progress >= 0 AND progress <= 1", name="progress_fraction"),
        UniqueConstraint("owner_site_id", "idempotency_key"),
        Index("ix_job_owner_created", "owner_site_id", "created_at"),
        Index("ix_job_status", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    owner_site_id: Mapped[str] = mapped_column(ForeignKey("site.id", ondelete="RESTRICT"))
    kind: Mapped[str] = mapped_column(String(32))
    dataset_id: Mapped[str | None] = mapped_column(
        ForeignKey("dataset.id", ondelete="RESTRICT"), index=True
    )
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: The typed plan fixed at submission (:mod:`service.dp.core.plan`, JSON form): the worker
    #: runs exactly this plan; NULL for jobs without one (submitted before plans were stored).
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    model_id: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class LedgerCharge(Base):
    """One charge against a dataset's budget, in exact ledger units.

    ``state`` is ``charged`` or ``refunded`` (only a job cancelled while queued is refunded).
    Invariant: a dataset's spent amounts equal the sums over its ``charged`` rows. A charge made
    by a study's federated fit names the dataset grant (``grant_id``) it was charged through;
    a grant's spent amounts equal the sums over its ``charged`` rows too.
    """

    __tablename__ = "ledger_charge"
    __table_args__ = (
        CheckConstraint("state IN ('charged', 'refunded')", name="state_known"),
        CheckConstraint("epsilon_units >= 0 AND delta_units >= 0", name="amounts_non_negative"),
        UniqueConstraint("dataset_id", "idempotency_key"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    dataset_id: Mapped[str] = mapped_column(
        ForeignKey("dataset.id", ondelete="RESTRICT"), index=True
    )
    job_id: Mapped[str | None] = mapped_column(
        ForeignKey("job.id", ondelete="RESTRICT"), index=True
    )
    epsilon_units: Mapped[int] = mapped_column(BigInteger)
    delta_units: Mapped[int] = mapped_column(BigInteger)
    mechanism: Mapped[str] = mapped_column(String(64))
    grant_id: Mapped[str | None] = mapped_column(
        ForeignKey("study_contribution.id", ondelete="RESTRICT"), index=True
    )
    state: Mapped[str] = mapped_column(String(16), default="charged")
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    refunded_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class Model(Base):
    """A released model: its JSON body (``service.dp`` ``to_dict()``), public preprocessing,
    the label it predicts and its privacy record. ``source`` says where it came from."""

    __tablename__ = "model"
    __table_args__ = (
        CheckConstraint(
            "source IN ('fit', 'upload', 'aggregate', 'federated')", name="source_known"
        ),
        Index("ix_model_owner_created", "owner_site_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    owner_site_id: Mapped[str] = mapped_column(ForeignKey("site.id", ondelete="RESTRICT"))
    name: Mapped[str | None] = mapped_column(String(200))
    source: Mapped[str] = mapped_column(String(16))
    mechanism: Mapped[str | None] = mapped_column(String(64))
    loss: Mapped[str] = mapped_column(String(16))
    feature_names: Mapped[list[str]] = mapped_column(JSON)
    preprocessing: Mapped[dict[str, Any]] = mapped_column(JSON)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    label: Mapped[dict[str, Any]] = mapped_column(JSON)
    privacy: Mapped[dict[str, Any]] = mapped_column(JSON)
    dataset_id: Mapped[str | None] = mapped_column(
        ForeignKey("dataset.id", ondelete="RESTRICT"), index=True
    )
    job_id: Mapped[str | None] = mapped_column(ForeignKey("job.id", ondelete="RESTRICT"))
    study_id: Mapped[str | None] = mapped_column(
        ForeignKey("study.id", ondelete="RESTRICT"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Study(Base):
    """Several sites learning together: a coordinator, members and a shared feature spec.

    ``spec`` is the normalised label + features every contribution must match;
    ``preprocessing`` is the :class:`service.dp.data.preprocessing.PreprocessingSpec` it encodes.
    """

    __tablename__ = "study"
    __table_args__ = (Index("ix_study_coordinator_created", "coordinator_site_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    coordinator_site_id: Mapped[str] = mapped_column(ForeignKey("site.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    preprocessing: Mapped[dict[str, Any]] = mapped_column(JSON)
    feature_names: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class StudyMember(Base):
    """A site taking part in a study (the coordinator is a member too)."""

    __tablename__ = "study_member"
    __table_args__ = (CheckConstraint("role IN ('coordinator', 'member')", name="role_known"),)

    study_id: Mapped[str] = mapped_column(
        ForeignKey("study.id", ondelete="CASCADE"), primary_key=True
    )
    site_id: Mapped[str] = mapped_column(
        ForeignKey("site.id", ondelete="RESTRICT"), primary_key=True, index=True
    )
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class StudyContribution(Base):
    """What a member brings to a study: a model it owns, or a grant on one of its datasets.

    A grant lets the study spend up to ``(epsilon_cap_units, delta_cap_units)`` of the dataset's
    budget (ledger units, :mod:`service.domain.ledger.units`); ``epsilon_spent_units`` and
    ``delta_spent_units`` are what the study's federated fits have charged through it so far
    (debited atomically with the dataset's own budget). ``used_at`` is set once an aggregation
    (or federated fit) used the contribution; from then on it cannot be withdrawn.
    """

    __tablename__ = "study_contribution"
    __table_args__ = (
        CheckConstraint("kind IN ('model', 'dataset')", name="kind_known"),
        CheckConstraint(
            "(kind = 'model' AND model_id IS NOT NULL AND dataset_id IS NULL"
            " AND epsilon_cap_units IS NULL AND delta_cap_units IS NULL)"
            " OR (kind = 'dataset' AND dataset_id IS NOT NULL AND model_id IS NULL"
            " AND epsilon_cap_units IS NOT NULL AND delta_cap_units IS NOT NULL)",
            name="kind_matches_target",
        ),
        CheckConstraint(
            "epsilon_cap_units IS NULL OR epsilon_cap_units > 0", name="epsilon_cap_positive"
        ),
        CheckConstraint(
            "delta_cap_units IS NULL OR delta_cap_units >= 0", name="delta_cap_non_negative"
        ),
        CheckConstraint(
            "epsilon_spent_units >= 0 AND delta_spent_units >= 0"
            " AND (epsilon_cap_units IS NULL OR epsilon_spent_units <= epsilon_cap_units)"
            " AND (delta_cap_units IS NULL OR delta_spent_units <= delta_cap_units)",
            name="grant_spent_within_cap",
        ),
        UniqueConstraint("study_id", "model_id"),
        UniqueConstraint("study_id", "dataset_id"),
        Index("ix_study_contribution_study_created", "study_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    study_id: Mapped[str] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"))
    site_id: Mapped[str] = mapped_column(ForeignKey("site.id", ondelete="RESTRICT"))
    kind: Mapped[str] = mapped_column(String(16))
    model_id: Mapped[str | None] = mapped_column(
        ForeignKey("model.id", ondelete="RESTRICT"), index=True
    )
    dataset_id: Mapped[str | None] = mapped_column(
        ForeignKey("dataset.id", ondelete="RESTRICT"), index=True
    )
    epsilon_cap_units: Mapped[int | None] = mapped_column(BigInteger)
    delta_cap_units: Mapped[int | None] = mapped_column(BigInteger)
    epsilon_spent_units: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    delta_spent_units: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class Evaluation(Base):
    """A private evaluation of a model on a dataset (issue 16): the released, noisy result and
    its privacy record. Its id is the id of the job that computed it, so a finished
    evaluation job's result is at ``/v1/evaluations/{job id}``."""

    __tablename__ = "evaluation"
    __table_args__ = (Index("ix_evaluation_model_created", "model_id", "created_at"),)

    id: Mapped[str] = mapped_column(ForeignKey("job.id", ondelete="RESTRICT"), primary_key=True)
    owner_site_id: Mapped[str] = mapped_column(ForeignKey("site.id", ondelete="RESTRICT"))
    model_id: Mapped[str] = mapped_column(ForeignKey("model.id", ondelete="RESTRICT"))
    dataset_id: Mapped[str] = mapped_column(
        ForeignKey("dataset.id", ondelete="RESTRICT"), index=True
    )
    epsilon: Mapped[float] = mapped_column(Float)
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
    privacy: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class RemoteContribution(Base):
    """Coordinator side of issue 15: a dataset a member site keeps on its own node and offers
    to a study. Only the public spec travels (``spec``: bounds, categories, label; ``n_features``
    the encoded width) with the caps the node accepts per job; never a row, never a row count.
    ``withdrawn_at`` is set when either side withdraws; a withdrawn contribution takes part in
    no new fit."""

    __tablename__ = "remote_contribution"
    __table_args__ = (
        CheckConstraint("epsilon_cap_units > 0", name="epsilon_cap_positive"),
        CheckConstraint("delta_cap_units >= 0", name="delta_cap_non_negative"),
        CheckConstraint("n_features > 0", name="n_features_positive"),
        Index("ix_remote_contribution_study_created", "study_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    study_id: Mapped[str] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"))
    site_id: Mapped[str] = mapped_column(ForeignKey("site.id", ondelete="RESTRICT"), index=True)
    node_dataset_id: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    n_features: Mapped[int] = mapped_column(Integer)
    epsilon_cap_units: Mapped[int] = mapped_column(BigInteger)
    delta_cap_units: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    withdrawn_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class DatasetOffer(Base):
    """Node side of issue 15: one of this node's datasets offered to a study on a coordinator.

    ``contribution_id`` is the coordinator's id of the remote contribution. The caps bound what
    the coordinator's jobs may charge through this offer, in ledger units; ``*_spent_units`` is
    what they have charged (debited in the same transaction as the dataset's own budget, one
    conditional UPDATE each, so the caps hold under concurrency)."""

    __tablename__ = "dataset_offer"
    __table_args__ = (
        CheckConstraint("epsilon_cap_units > 0", name="epsilon_cap_positive"),
        CheckConstraint("delta_cap_units >= 0", name="delta_cap_non_negative"),
        CheckConstraint(
            "epsilon_spent_units >= 0 AND delta_spent_units >= 0"
            " AND epsilon_spent_units <= epsilon_cap_units"
            " AND delta_spent_units <= delta_cap_units",
            name="offer_spent_within_cap",
        ),
        UniqueConstraint("contribution_id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    dataset_id: Mapped[str] = mapped_column(
        ForeignKey("dataset.id", ondelete="RESTRICT"), index=True
    )
    study_id: Mapped[str] = mapped_column(String(64))
    contribution_id: Mapped[str] = mapped_column(String(64))
    epsilon_cap_units: Mapped[int] = mapped_column(BigInteger)
    delta_cap_units: Mapped[int] = mapped_column(BigInteger)
    epsilon_spent_units: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    delta_spent_units: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    withdrawn_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class NodeJob(Base):
    """Node side: a coordinator's job this node accepted for one offer, with the terms it
    accepted (protocol, parameters, rounds, ε, δ) and its charge. Unique per (offer, the
    coordinator's job id): accepting is idempotent, so a restarted agent never charges twice.
    ``status``: ``accepted`` (charged, running), ``finished`` or ``failed``."""

    __tablename__ = "node_job"
    __table_args__ = (
        CheckConstraint("status IN ('accepted', 'finished', 'failed')", name="status_known"),
        UniqueConstraint("offer_id", "coordinator_job_id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    offer_id: Mapped[str] = mapped_column(ForeignKey("dataset_offer.id", ondelete="RESTRICT"))
    coordinator_job_id: Mapped[str] = mapped_column(String(64))
    terms: Mapped[dict[str, Any]] = mapped_column(JSON)
    charge_id: Mapped[str] = mapped_column(ForeignKey("ledger_charge.id", ondelete="RESTRICT"))
    status: Mapped[str] = mapped_column(String(16), default="accepted")
    error: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
