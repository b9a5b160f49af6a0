"""Concurrent subscriptions per client IP, counted across the node's processes.

Each row is what one database session (a process's dedicated connection, named by its
backend pid and start time) holds for one key. When a process dies its session ends, and
its rows stop counting at once: they are counted only while their session is alive.

Revision ID: 0006
Revises: 0005
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Losing the rows in a crash frees every slot, which is right: every holder died too.
    op.execute(
        """CREATE UNLOGGED TABLE subscription_slots (
            key text NOT NULL,
            pid integer NOT NULL,
            backend_start timestamptz NOT NULL,
            held integer NOT NULL,
            PRIMARY KEY (key, pid, backend_start)
        )"""
    )


def downgrade() -> None:
    op.execute("DROP TABLE subscription_slots")
