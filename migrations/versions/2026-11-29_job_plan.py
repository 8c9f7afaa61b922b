"""Jobs keep the typed plan fixed at submission (issue 27 §1).

Revision ID: 5d2b7e91a0c3
Revises: c4f0a6d2e819
Create Date: 2026-11-29 00:00:00.000000

Reviewed by hand: ``job`` gains one nullable JSON column, ``plan`` (NULL for every existing
job: a job without a stored plan is run as before, by re-deriving its calibration), so no data
migration and no table rewrite on PostgreSQL; the downgrade drops exactly that column.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5d2b7e91a0c3"
down_revision: str | Sequence[str] | None = "c4f0a6d2e819"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("plan", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("plan")
