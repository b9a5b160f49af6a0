"""Forks: every signed version of a forked (originator, sequence id).

When an originator signs two different envelopes for one sequence id, each node keeps every
version here as evidence (xnode.core.evidence checks them), and the log (originator_envelopes)
holds the one xnode.core.forks picks: the lower keccak256 of the signed bytes, on every node.
The log's version is among the rows here. Rows are identical on every node that saw the
same versions, so nodes can be compared row for row.

Revision ID: 0005
Revises: 0004
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """CREATE TABLE sequence_forks (
            originator_node_id integer NOT NULL,
            originator_sequence_id bigint NOT NULL,
            envelope_hash bytea NOT NULL,
            envelope bytea NOT NULL,
            PRIMARY KEY (originator_node_id, originator_sequence_id, envelope_hash)
        )"""
    )


def downgrade() -> None:
    op.execute("DROP TABLE sequence_forks")
