"""Dataset grants record what a study has spent through them; federated models.

Revision ID: 3c5e8d1f2a47
Revises: 7a9310248ea0
Create Date: 2026-11-23 12:10:00.000000

Reviewed by hand. Three changes to existing tables:

* ``study_contribution`` gains ``epsilon_spent_units`` and ``delta_spent_units`` (NOT NULL,
  server default 0: no grant has been charged through before this revision) and a CHECK that
  keeps them between 0 and the grant's caps;
* ``ledger_charge`` gains a nullable ``grant_id`` (no backfill: earlier charges were made on a
  dataset directly) with its index and foreign key;
* ``model.source`` may also be ``federated``; the CHECK is replaced (on SQLite the batch
  operation copies the table, on PostgreSQL it is a DROP/ADD CONSTRAINT). The downgrade refuses
  to run while federated models exist, rather than deleting them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3c5e8d1f2a47"
down_revision: str | Sequence[str] | None = "7a9310248ea0"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("study_contribution", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("epsilon_spent_units", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch_op.add_column(
            sa.Column("delta_spent_units", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch_op.create_check_constraint(
            op.f("ck_study_contribution_grant_spent_within_cap"),
            "epsilon_spent_units >= 0 AND delta_spent_units >= 0"
            " AND (epsilon_cap_units IS NULL OR epsilon_spent_units <= epsilon_cap_units)"
            " AND (delta_cap_units IS NULL OR delta_spent_units <= delta_cap_units)",
        )

    with op.batch_alter_table("ledger_charge", schema=None) as batch_op:
        batch_op.add_column(sa.Column("grant_id", sa.String(length=32), nullable=True))
        batch_op.create_index(batch_op.f("ix_ledger_charge_grant_id"), ["grant_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_ledger_charge_grant_id_study_contribution"),
            "study_contribution",
            ["grant_id"],
            ["id"],
            ondelete="RESTRICT",
        )

    with op.batch_alter_table("model", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_model_source_known"), type_="check")
        batch_op.create_check_constraint(
            op.f("ck_model_source_known"), "source IN ('fit', 'upload', 'aggregate', 'federated')"
        )


def downgrade() -> None:
    bind = op.get_bind()
    if bind.execute(sa.text("SELECT COUNT(*) FROM model WHERE source = 'federated'")).scalar():
        raise RuntimeError("federated models exist; delete them before downgrading")
    with op.batch_alter_table("model", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_model_source_known"), type_="check")
        batch_op.create_check_constraint(
            op.f("ck_model_source_known"), "source IN ('fit', 'upload', 'aggregate')"
        )

    with op.batch_alter_table("ledger_charge", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_ledger_charge_grant_id_study_contribution"), type_="foreignkey"
        )
        batch_op.drop_index(batch_op.f("ix_ledger_charge_grant_id"))
        batch_op.drop_column("grant_id")

    with op.batch_alter_table("study_contribution", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_study_contribution_grant_spent_within_cap"), type_="check")
        batch_op.drop_column("delta_spent_units")
        batch_op.drop_column("epsilon_spent_units")
