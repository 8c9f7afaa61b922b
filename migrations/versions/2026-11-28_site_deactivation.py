"""Sites can be deactivated by the admin (issue 26 §1).

Revision ID: c4f0a6d2e819
Revises: 2a588fb5a329
Create Date: 2026-11-28 19:40:00.000000

Reviewed by hand: ``site`` gains one nullable column, ``deactivated_at`` (NULL for every
existing site: all stay active), so no data migration and no table rewrite on PostgreSQL; the
downgrade drops exactly that column.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.db.base

revision: str = "c4f0a6d2e819"
down_revision: str | Sequence[str] | None = "2a588fb5a329"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("site", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("deactivated_at", service.db.base.UTCDateTime(), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("site", schema=None) as batch_op:
        batch_op.drop_column("deactivated_at")
