"""Leaf openings: the content hash of each format 2 leaf (keccak256 of the unsigned
originator envelope) kept beside it in `log_leaves.content_hash`, so that a leaf whose
envelope expired and was pruned can still be opened: an "expired" account of it carries its
opening (xnode.core.withholding, docs/evidence.md "Withholding").

Filled here for every format 2 leaf whose envelope is held (and opens it); NULL for leaves
whose envelope is gone already (they expired before the openings epoch, or are losses that
repair fetches back) and for format 1 leaves.

Revision ID: 0012
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_BATCH = 10_000


def _fill(bind: sa.Connection) -> None:
    from xnode.core.leaves import content_hash_of, opened_leaf_v2

    select = sa.text(
        "SELECT l.originator_node_id, l.sequence_id, l.leaf_hash, l.expiry, e.envelope"
        " FROM log_leaves l JOIN originator_envelopes e"
        " ON e.originator_node_id = l.originator_node_id"
        " AND e.originator_sequence_id = l.sequence_id"
        " WHERE (l.originator_node_id, l.sequence_id) > (:o, :s) AND l.expiry IS NOT NULL"
        " ORDER BY l.originator_node_id, l.sequence_id LIMIT :n"
    )
    update = sa.text(
        "UPDATE log_leaves SET content_hash = :h WHERE originator_node_id = :o AND sequence_id = :s"
    )
    last = (0, 0)
    while rows := bind.execute(select, {"o": last[0], "s": last[1], "n": _BATCH}).all():
        values = []
        for originator, sequence_id, leaf, expiry, raw in rows:
            try:
                content_hash = content_hash_of(bytes(raw))
            except ValueError:
                continue  # bytes that do not decode: the scrub withdraws them
            if opened_leaf_v2(content_hash, expiry) == bytes(leaf):
                values.append({"o": originator, "s": sequence_id, "h": content_hash})
        if values:
            bind.execute(update, values)
        last = (rows[-1][0], rows[-1][1])


def upgrade() -> None:
    op.execute("ALTER TABLE log_leaves ADD COLUMN content_hash bytea")
    _fill(op.get_bind())


def downgrade() -> None:
    op.execute("ALTER TABLE log_leaves DROP COLUMN content_hash")
