"""Site nodes (issue 15): remote contributions, dataset offers and the jobs a node accepted.

Revision ID: 2a588fb5a329
Revises: b7c3e1f29a64
Create Date: 2026-11-28 04:50:07.968460

Reviewed by hand: three new tables and their indexes, no change to existing tables (no data
migration, no lock on a large table); the downgrade drops exactly those, children first.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.db.base

revision: str = "2a588fb5a329"
down_revision: str | Sequence[str] | None = "b7c3e1f29a64"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dataset_offer",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("dataset_id", sa.String(length=32), nullable=False),
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("contribution_id", sa.String(length=64), nullable=False),
        sa.Column("epsilon_cap_units", sa.BigInteger(), nullable=False),
        sa.Column("delta_cap_units", sa.BigInteger(), nullable=False),
        sa.Column("epsilon_spent_units", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("delta_spent_units", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("created_at", service.db.base.UTCDateTime(), nullable=False),
        sa.Column("withdrawn_at", service.db.base.UTCDateTime(), nullable=True),
        sa.CheckConstraint(
            "delta_cap_units >= 0", name=op.f("ck_dataset_offer_delta_cap_non_negative")
        ),
        sa.CheckConstraint(
            "epsilon_cap_units > 0", name=op.f("ck_dataset_offer_epsilon_cap_positive")
        ),
        sa.CheckConstraint(
            "epsilon_spent_units >= 0 AND delta_spent_units >= 0"
            " AND epsilon_spent_units <= epsilon_cap_units"
            " AND delta_spent_units <= delta_cap_units",
            name=op.f("ck_dataset_offer_offer_spent_within_cap"),
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["dataset.id"],
            name=op.f("fk_dataset_offer_dataset_id_dataset"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset_offer")),
        sa.UniqueConstraint("contribution_id", name=op.f("uq_dataset_offer_contribution_id")),
    )
    with op.batch_alter_table("dataset_offer", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_dataset_offer_dataset_id"), ["dataset_id"], unique=False
        )

    op.create_table(
        "remote_contribution",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("study_id", sa.String(length=32), nullable=False),
        sa.Column("site_id", sa.String(length=32), nullable=False),
        sa.Column("node_dataset_id", sa.String(length=64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("n_features", sa.Integer(), nullable=False),
        sa.Column("epsilon_cap_units", sa.BigInteger(), nullable=False),
        sa.Column("delta_cap_units", sa.BigInteger(), nullable=False),
        sa.Column("created_at", service.db.base.UTCDateTime(), nullable=False),
        sa.Column("withdrawn_at", service.db.base.UTCDateTime(), nullable=True),
        sa.CheckConstraint(
            "delta_cap_units >= 0", name=op.f("ck_remote_contribution_delta_cap_non_negative")
        ),
        sa.CheckConstraint(
            "epsilon_cap_units > 0", name=op.f("ck_remote_contribution_epsilon_cap_positive")
        ),
        sa.CheckConstraint(
            "n_features > 0", name=op.f("ck_remote_contribution_n_features_positive")
        ),
        sa.ForeignKeyConstraint(
            ["site_id"],
            ["site.id"],
            name=op.f("fk_remote_contribution_site_id_site"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["study.id"],
            name=op.f("fk_remote_contribution_study_id_study"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_remote_contribution")),
    )
    with op.batch_alter_table("remote_contribution", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_remote_contribution_site_id"), ["site_id"], unique=False
        )
        batch_op.create_index(
            "ix_remote_contribution_study_created", ["study_id", "created_at"], unique=False
        )

    op.create_table(
        "node_job",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("offer_id", sa.String(length=32), nullable=False),
        sa.Column("coordinator_job_id", sa.String(length=64), nullable=False),
        sa.Column("terms", sa.JSON(), nullable=False),
        sa.Column("charge_id", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.String(length=500), nullable=True),
        sa.Column("created_at", service.db.base.UTCDateTime(), nullable=False),
        sa.Column("finished_at", service.db.base.UTCDateTime(), nullable=True),
        sa.CheckConstraint(
            "status IN ('accepted', 'finished', 'failed')", name=op.f("ck_node_job_status_known")
        ),
        sa.ForeignKeyConstraint(
            ["charge_id"],
            ["ledger_charge.id"],
            name=op.f("fk_node_job_charge_id_ledger_charge"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["offer_id"],
            ["dataset_offer.id"],
            name=op.f("fk_node_job_offer_id_dataset_offer"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_job")),
        sa.UniqueConstraint(
            "offer_id", "coordinator_job_id", name=op.f("uq_node_job_offer_id_coordinator_job_id")
        ),
    )


def downgrade() -> None:
    op.drop_table("node_job")
    with op.batch_alter_table("remote_contribution", schema=None) as batch_op:
        batch_op.drop_index("ix_remote_contribution_study_created")
        batch_op.drop_index(batch_op.f("ix_remote_contribution_site_id"))

    op.drop_table("remote_contribution")
    with op.batch_alter_table("dataset_offer", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_dataset_offer_dataset_id"))

    op.drop_table("dataset_offer")
