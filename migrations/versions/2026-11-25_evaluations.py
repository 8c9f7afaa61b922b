"""Private evaluations of models (issue 16).

Revision ID: 8e41c2a7d9b3
Revises: 5d2b7e9c4a10
Create Date: 2026-11-25 08:45:00.000000

Reviewed by hand: one new table ``evaluation`` keyed by the id of the job that computed it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.db.base

revision: str = "8e41c2a7d9b3"
down_revision: str | Sequence[str] | None = "5d2b7e9c4a10"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "evaluation",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("owner_site_id", sa.String(length=32), nullable=False),
        sa.Column("model_id", sa.String(length=32), nullable=False),
        sa.Column("dataset_id", sa.String(length=32), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("privacy", sa.JSON(), nullable=False),
        sa.Column("created_at", service.db.base.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["id"], ["job.id"], name=op.f("fk_evaluation_id_job"), ondelete="RESTRICT"
        ),
        sa.ForeignKeyConstraint(
            ["owner_site_id"],
            ["site.id"],
            name=op.f("fk_evaluation_owner_site_id_site"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["model.id"],
            name=op.f("fk_evaluation_model_id_model"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["dataset.id"],
            name=op.f("fk_evaluation_dataset_id_dataset"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evaluation")),
    )
    with op.batch_alter_table("evaluation", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_evaluation_dataset_id"), ["dataset_id"], unique=False)
        batch_op.create_index(
            "ix_evaluation_model_created", ["model_id", "created_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("evaluation", schema=None) as batch_op:
        batch_op.drop_index("ix_evaluation_model_created")
        batch_op.drop_index(batch_op.f("ix_evaluation_dataset_id"))
    op.drop_table("evaluation")
