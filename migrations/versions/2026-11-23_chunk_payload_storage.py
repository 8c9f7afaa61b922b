"""Stored dataset chunks are not compressed a second time by PostgreSQL.

Revision ID: 9b2d4e6f8a13
Revises: 3c5e8d1f2a47
Create Date: 2026-11-23 16:00:00.000000

Reviewed by hand. ``dataset_chunk.payload`` holds Arrow batches that PrivFit has already
compressed with zstd. PostgreSQL's default storage for ``bytea`` (EXTENDED) tries to compress
every value again before moving it out of line; a chunk whose first kilobyte compresses well
(the Arrow schema) is worked through in full before PostgreSQL gives up, which made storing
the chunks of a 50 MB upload take 0.15–0.18 s instead of 0.03 s. EXTERNAL keeps values out of
line without compressing them. Only values written afterwards are affected (earlier chunks stay
readable as they are). Nothing to do on SQLite, which never compresses.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "9b2d4e6f8a13"
down_revision: str | Sequence[str] | None = "3c5e8d1f2a47"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _set_storage(mode: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE dataset_chunk ALTER COLUMN payload SET STORAGE {mode}")


def upgrade() -> None:
    _set_storage("EXTERNAL")


def downgrade() -> None:
    _set_storage("EXTENDED")
