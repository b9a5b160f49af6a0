"""Leaf format 2 (xnode.core.leaves, docs/proofs.md): each leaf commits to its envelope's
expiry, kept beside it in `log_leaves.expiry` (0: never; NULL: a format 1 leaf, which
commits to none).

Existing logs move to format 2: every leaf whose envelope is held is recomputed from it,
and the trees are rebuilt over the new leaves. A leaf held without its envelope stays
format 1 (there is nothing to recompute it from). The checkpoints signed over format 1
trees no longer match them: they are kept aside (conflict says why, they stay as
history and evidence of format 1) and each originator starts a chain of format 2
checkpoints, which name their format, so format 1 and format 2 checkpoints are never
compared (xnode.core.checkpoints.check_consistent).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_BATCH = 10_000
_STORED_MIN_LEVEL = 4  # xnode.store.logs.STORED_MIN_LEVEL
FORMAT_1_ASIDE = "leaf format 1: signed before migration 0008 moved the log to leaf format 2"


def _releaf(bind: sa.Connection) -> None:
    from xnode.core.leaves import leaf_v2, signed_content
    from xnode.core.reconciliation import fingerprint_part

    select = sa.text(
        "SELECT l.originator_node_id, l.sequence_id, e.envelope"
        " FROM log_leaves l JOIN originator_envelopes e"
        " ON e.originator_node_id = l.originator_node_id"
        " AND e.originator_sequence_id = l.sequence_id"
        " WHERE (l.originator_node_id, l.sequence_id) > (:o, :s)"
        " ORDER BY l.originator_node_id, l.sequence_id LIMIT :n"
    )
    update = sa.text(
        "UPDATE log_leaves SET leaf_hash = :leaf, fingerprint = :fingerprint, expiry = :expiry"
        " WHERE originator_node_id = :o AND sequence_id = :s"
    )
    last = (0, 0)
    while rows := bind.execute(select, {"o": last[0], "s": last[1], "n": _BATCH}).all():
        values = []
        for originator, sequence_id, raw in rows:
            content, expiry = signed_content(bytes(raw))
            leaf = leaf_v2(content, expiry)
            values.append(
                {
                    "o": originator,
                    "s": sequence_id,
                    "leaf": leaf,
                    "fingerprint": fingerprint_part(leaf),
                    "expiry": expiry,
                }
            )
        bind.execute(update, values)
        last = (rows[-1][0], rows[-1][1])


def _rebuild_tree(bind: sa.Connection, originator: int) -> None:
    """The tree over the log's contiguous prefix, its stored subtrees (level >= 4) as the
    node keeps them; subtrees past a gap are stored again as their gaps fill."""
    from xnode.core.merkle import Frontier

    frontier = Frontier()
    select = sa.text(
        "SELECT sequence_id, leaf_hash FROM log_leaves WHERE originator_node_id = :o"
        " AND sequence_id > :s ORDER BY sequence_id LIMIT :n"
    )
    insert = sa.text(
        "INSERT INTO log_nodes (originator_node_id, level, node_index, hash)"
        " VALUES (:o, :level, :i, :hash)"
    )
    while rows := bind.execute(select, {"o": originator, "s": frontier.size, "n": _BATCH}).all():
        contiguous = []
        for sequence_id, leaf in rows:
            if sequence_id != frontier.size + len(contiguous) + 1:
                break
            contiguous.append(bytes(leaf))
        nodes = frontier.extend(contiguous, _STORED_MIN_LEVEL)
        if nodes:
            bind.execute(
                insert, [{"o": originator, "level": lv, "i": i, "hash": h} for lv, i, h in nodes]
            )
        if len(contiguous) < len(rows):
            break
    bind.execute(
        sa.text("UPDATE log_trees SET tree_size = :n WHERE originator_node_id = :o"),
        {"o": originator, "n": frontier.size},
    )


def upgrade() -> None:
    bind = op.get_bind()
    op.execute("ALTER TABLE log_leaves ADD COLUMN expiry bigint")
    _releaf(bind)
    op.execute("DELETE FROM log_nodes")
    for (originator,) in bind.execute(sa.text("SELECT originator_node_id FROM log_trees")).all():
        _rebuild_tree(bind, originator)
    bind.execute(
        sa.text("UPDATE log_checkpoints SET conflict = :why WHERE conflict IS NULL"),
        {"why": FORMAT_1_ASIDE},
    )


def downgrade() -> None:
    raise NotImplementedError(
        "leaf format 2 cannot be undone: the format 1 leaves were replaced (restore a backup)"
    )
