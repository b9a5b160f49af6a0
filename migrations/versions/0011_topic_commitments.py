"""Per-topic commitments (docs/proofs.md, "Completeness proofs"): per originator, each
topic's own log of that originator's envelopes, each log's head, and the inner nodes of the
sparse Merkle map from topic to head down to the bucket depth (20). `topic_maps` says how
far each originator's map has been computed and its root there.

Nothing is backfilled: a node's map starts at its next checkpoint, from the log's start
when every envelope of it is still held, else after its current end (`first_sequence_id`).

Revision ID: 0011
Revises: 0010
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

STATEMENTS = [
    """CREATE TABLE topic_maps (
        originator_node_id integer PRIMARY KEY,
        tree_size bigint NOT NULL,
        first_sequence_id bigint NOT NULL,
        root bytea NOT NULL
    )""",
    # The map's leaves: topic_key = sha256(topic); peaks: the topic log's right edge (its
    # perfect subtrees' hashes, 32 bytes each, left to right) to append without reading it.
    """CREATE TABLE topic_heads (
        originator_node_id integer NOT NULL,
        topic_key bytea NOT NULL,
        size bigint NOT NULL,
        root bytea NOT NULL,
        peaks bytea NOT NULL,
        PRIMARY KEY (originator_node_id, topic_key)
    )""",
    """CREATE TABLE topic_entries (
        originator_node_id integer NOT NULL,
        topic_key bytea NOT NULL,
        position bigint NOT NULL,
        sequence_id bigint NOT NULL,
        expiry bigint NOT NULL,
        content_hash bytea NOT NULL,
        PRIMARY KEY (originator_node_id, topic_key, position)
    )""",
    # Inner nodes only (two topics or more under them); empty and one-topic subtrees are
    # found in topic_heads by key range.
    """CREATE TABLE topic_map_nodes (
        originator_node_id integer NOT NULL,
        depth smallint NOT NULL,
        node_index bigint NOT NULL,
        hash bytea NOT NULL,
        PRIMARY KEY (originator_node_id, depth, node_index)
    )""",
]


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TABLE topic_map_nodes, topic_entries, topic_heads, topic_maps")
