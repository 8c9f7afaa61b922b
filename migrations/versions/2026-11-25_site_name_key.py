"""Site names are unique after Unicode normalisation and case folding.

Revision ID: 5d2b7e9c4a10
Revises: 9b2d4e6f8a13
Create Date: 2026-11-25 08:10:00.000000

Reviewed by hand. ``site`` gains ``name_key`` (NFKC, case-folded, NFKC again) with a unique
constraint (NFKC_Casefold: invisible, default-ignorable characters are dropped first). Existing
rows are backfilled; should two existing names collide under the new rule
(they were accepted before it), the later one's key gets its site id appended so the upgrade
never fails or renames anyone, and only new names are held to the rule.
"""

from collections.abc import Sequence
import unicodedata

import sqlalchemy as sa
from alembic import op

revision: str = "5d2b7e9c4a10"
down_revision: str | Sequence[str] | None = "9b2d4e6f8a13"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Unicode's Default_Ignorable_Code_Point ranges, dropped from the key (as in NFKC_Casefold).
_DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)


def _key(name: str) -> str:
    visible = "".join(
        ch for ch in name if not any(lo <= ord(ch) <= hi for lo, hi in _DEFAULT_IGNORABLE)
    )
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", visible).casefold())


def upgrade() -> None:
    with op.batch_alter_table("site", schema=None) as batch_op:
        batch_op.add_column(sa.Column("name_key", sa.String(length=1000), nullable=True))
    connection = op.get_bind()
    site = sa.table("site", sa.column("id", sa.String), sa.column("name", sa.String),
                    sa.column("name_key", sa.String), sa.column("created_at", sa.DateTime))
    seen: set[str] = set()
    rows = connection.execute(
        sa.select(site.c.id, site.c.name).order_by(site.c.created_at, site.c.id)
    ).all()
    for site_id, name in rows:
        key = _key(name)
        if key in seen:
            key = f"{key}#{site_id}"
        seen.add(key)
        connection.execute(site.update().where(site.c.id == site_id).values(name_key=key))
    with op.batch_alter_table("site", schema=None) as batch_op:
        batch_op.alter_column("name_key", existing_type=sa.String(length=1000), nullable=False)
        batch_op.create_unique_constraint(op.f("uq_site_name_key"), ["name_key"])


def downgrade() -> None:
    with op.batch_alter_table("site", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("uq_site_name_key"), type_="unique")
        batch_op.drop_column("name_key")
