"""Range fingerprints from tiles: each stored tile (a perfect subtree of 16 leaves,
log_nodes level 4) keeps the XOR of its leaves' fingerprints, so a range's fingerprint
(xnode.store.logs) reads one row per complete tile instead of 16 leaves. NULL until known:
tiles this node's own sequencer completes get theirs when a fingerprint is first asked for
(a partial index finds them); readers never count a tile whose fingerprint is NULL.

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE log_nodes ADD COLUMN fingerprint bigint")
    op.execute(
        "CREATE INDEX log_nodes_unfingerprinted ON log_nodes (originator_node_id, node_index)"
        " WHERE level = 4 AND fingerprint IS NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX log_nodes_unfingerprinted")
    op.execute("ALTER TABLE log_nodes DROP COLUMN fingerprint")
