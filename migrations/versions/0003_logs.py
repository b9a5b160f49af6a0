"""Committed logs: leaf hashes of every envelope of originators >= 100, the perfect
subtree hashes of each log's tree, how far each tree is built, and signed checkpoints.

Leaves are keyed by sequence id and outlive pruning, so old roots stay checkable after the
envelopes expire. Leaves of a replicated log may arrive with gaps; `log_trees.tree_size` is
the contiguous prefix 1..tree_size the tree (and `log_nodes`) covers. Existing envelopes get
their leaves here; their trees are built by the node on its next insert for that originator.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

STATEMENTS = [
    # fingerprint = the leaf's first 8 bytes as a signed bigint: bit_xor over a range of
    # sequence ids is the range's fingerprint (xnode.core.reconciliation).
    """CREATE TABLE log_leaves (
        originator_node_id integer NOT NULL,
        sequence_id bigint NOT NULL,
        leaf_hash bytea NOT NULL,
        fingerprint bigint NOT NULL,
        PRIMARY KEY (originator_node_id, sequence_id)
    )""",
    # Perfect subtrees of level >= 4 (xnode.store.logs.STORED_MIN_LEVEL; lower ones are hashed
    # from their leaves): hash of leaves [node_index * 2^level, (node_index + 1) * 2^level).
    # Any root or proof is built from these and log_leaves.
    """CREATE TABLE log_nodes (
        originator_node_id integer NOT NULL,
        level smallint NOT NULL,
        node_index bigint NOT NULL,
        hash bytea NOT NULL,
        PRIMARY KEY (originator_node_id, level, node_index)
    )""",
    """CREATE TABLE log_trees (
        originator_node_id integer PRIMARY KEY,
        tree_size bigint NOT NULL
    )""",
    # Checkpoints of this node and of its peers. `conflict` is NULL for accepted ones (one
    # chain per originator); otherwise it says why the checkpoint was kept aside as evidence.
    """CREATE TABLE log_checkpoints (
        id bigserial PRIMARY KEY,
        originator_node_id integer NOT NULL,
        tree_size bigint NOT NULL,
        root bytea NOT NULL,
        originator_ns bigint NOT NULL,
        previous_hash bytea NOT NULL,
        signed bytea NOT NULL,
        conflict text,
        recorded_at timestamptz NOT NULL DEFAULT now()
    )""",
    """CREATE UNIQUE INDEX log_checkpoints_accepted
        ON log_checkpoints (originator_node_id, tree_size) WHERE conflict IS NULL""",
    "CREATE INDEX log_checkpoints_conflicts ON log_checkpoints (id) WHERE conflict IS NOT NULL",
]

_BATCH = 10_000


def _backfill() -> None:
    """Leaves of the envelopes stored before this revision (keccak is not in SQL)."""
    from xnode.core.checkpoints import envelope_leaf
    from xnode.core.reconciliation import fingerprint_part

    bind = op.get_bind()
    select = sa.text(
        "SELECT originator_node_id, originator_sequence_id, envelope FROM originator_envelopes"
        " WHERE (originator_node_id, originator_sequence_id) > (:o, :s)"
        " AND originator_node_id >= 100"
        " ORDER BY originator_node_id, originator_sequence_id LIMIT :n"
    )
    insert = sa.text(
        "INSERT INTO log_leaves VALUES (:o, :s, :leaf, :fingerprint) ON CONFLICT DO NOTHING"
    )
    last = (0, 0)
    while rows := bind.execute(select, {"o": last[0], "s": last[1], "n": _BATCH}).all():
        values = []
        for originator, sequence_id, raw in rows:
            leaf = envelope_leaf(bytes(raw))
            row = {"o": originator, "s": sequence_id, "leaf": leaf}
            values.append({**row, "fingerprint": fingerprint_part(leaf)})
        bind.execute(insert, values)
        last = (rows[-1][0], rows[-1][1])


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)
    _backfill()


def downgrade() -> None:
    op.execute("DROP TABLE log_checkpoints, log_trees, log_nodes, log_leaves")
