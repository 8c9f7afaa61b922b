"""The distributed job queue's schema (procrastinate) and job-finished notifications.

Revision ID: b7c3e1f29a64
Revises: 8e41c2a7d9b3
Create Date: 2026-11-28 05:00:00.000000

Reviewed by hand. PostgreSQL only; on SQLite (the embedded setup, which has no queue) both
steps are no-ops.

* procrastinate's schema exactly as procrastinate 3.10.0 ships it (``migrations/sql/``, a
  copy of ``procrastinate/sql/schema.sql``: a migration must not change when the library is
  upgraded; a later procrastinate version's own migration scripts become later revisions).
  Its tables are not PrivFit models: ``env.py`` leaves ``procrastinate_*`` out of
  ``alembic check``.
* A trigger on ``job`` that sends ``NOTIFY privfit_job_finished, '<job id>'`` when a job
  reaches ``succeeded``, ``failed`` or ``cancelled``, whichever process changes it; the
  notification is delivered at commit, so a long poll on any API replica wakes once the final
  state is visible.
"""

from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "b7c3e1f29a64"
down_revision: str | Sequence[str] | None = "8e41c2a7d9b3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = Path(__file__).resolve().parent.parent / "sql" / "procrastinate-3.10.0.sql"

NOTIFY_FUNCTION = """
CREATE FUNCTION privfit_notify_job_finished() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('privfit_job_finished', NEW.id);
    RETURN NEW;
END;
$$
"""

NOTIFY_TRIGGER = """
CREATE TRIGGER privfit_job_finished
    AFTER UPDATE OF status ON job
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION privfit_notify_job_finished()
"""

DROP_PROCRASTINATE = """
DO $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT c.relname FROM pg_class c
        WHERE c.relkind = 'r' AND c.relname LIKE 'procrastinate\\_%'
          AND c.relnamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('DROP TABLE IF EXISTS %I CASCADE', item.relname);
    END LOOP;
    FOR item IN
        SELECT p.oid::regprocedure AS signature FROM pg_proc p
        WHERE p.proname LIKE 'procrastinate\\_%'
          AND p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', item.signature);
    END LOOP;
    FOR item IN
        SELECT t.typname FROM pg_type t
        WHERE t.typname LIKE 'procrastinate\\_%' AND t.typtype IN ('e', 'c')
          AND t.typnamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('DROP TYPE IF EXISTS %I CASCADE', item.typname);
    END LOOP;
END;
$$
"""


def _raw_execute(sql: str) -> None:
    """Run a script of several statements as is: no bind-parameter parsing (the schema holds
    ``%`` and ``:`` in function bodies), through the migration's own connection and
    transaction."""
    driver_connection = op.get_bind().connection.driver_connection
    assert driver_connection is not None
    driver_connection.execute(sql)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _raw_execute(SCHEMA.read_text(encoding="utf-8"))
    _raw_execute(NOTIFY_FUNCTION)
    _raw_execute(NOTIFY_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _raw_execute("DROP TRIGGER IF EXISTS privfit_job_finished ON job")
    _raw_execute("DROP FUNCTION IF EXISTS privfit_notify_job_finished()")
    _raw_execute(DROP_PROCRASTINATE)
