"""Committed logs in Postgres: leaf hashes, perfect subtree hashes, tree sizes, checkpoints.

Leaves are written in the same transaction as their envelopes (the sequencer for this node's
own log, `ReplicationStore.insert_received` for replicated ones). The tree over sequence ids
1..n is built only over the contiguous prefix of leaves held (`log_trees.tree_size`): a
replicated log can arrive with gaps, and its tree grows when they fill (`extend_tree`, run
in the inserting transaction, under the log_trees row lock). Nothing here is ever pruned.

`log_nodes` holds every perfect subtree of level >= STORED_MIN_LEVEL whose leaves are all
held, past gaps too (`complete_subtrees`, for the leaves an insert added): filling a gap then
recomputes only the paths above it, and the prefix grows by jumping over stored subtrees
instead of re-hashing the leaves behind the gap. Leaves a database got before this rule
(no subtrees past its gaps) are hashed the old way, a chunk at a time."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from xnode.core import merkle
from xnode.core.checkpoints import (
    Checkpoint,
    TopicCommitment,
    envelope_leaf,
    has_log,
    parse_checkpoint,
)
from xnode.core.envelopes import IndexedEnvelope
from xnode.core.leaves import content_hash_of
from xnode.core.reconciliation import Fingerprint, SequenceRange, fingerprint_part
from xnode.store.connection import PgConnection
from xnode.store.errors import driver_errors_translated
from xnode.store.topics import advance_topics
from xnode.usecases.logs import IssueSigner, StoredCheckpoint

EXTEND_CHUNK = 10_000
# Perfect subtrees below this level are not stored but hashed from their (at most 8) leaves
# when a root or proof needs them: a log then adds about 1 + 1/16 rows per envelope, not 2.
# Level 4 nodes are the tiles range fingerprints read (the SQL below and migration 0007
# spell it 4 and 16).
STORED_MIN_LEVEL = 4
# Serializes checkpoint issuing per originator across processes sharing the database.
_ISSUE_LOCK = 0x6C6F6773  # "logs"

# originator, sequence id, leaf hash, fingerprint, committed expiry (leaf format 2)
# originator, sequence id, leaf, fingerprint, expiry, content hash (the leaf's opening)
LeafColumns = tuple[list[int], list[int], list[bytes], list[int], list[int], list[bytes]]

_LOCK_TREE = """
INSERT INTO log_trees VALUES ($1, 0)
ON CONFLICT (originator_node_id) DO UPDATE SET tree_size = log_trees.tree_size
RETURNING tree_size
"""
_HIGHEST_LEAF = "SELECT max(sequence_id) FROM log_leaves WHERE originator_node_id = $1"
_LEAVES_AFTER = """
SELECT sequence_id, leaf_hash FROM log_leaves
WHERE originator_node_id = $1 AND sequence_id > $2 ORDER BY sequence_id LIMIT $3
"""
# Scalar subqueries: one primary-key lookup per node, whatever the planner guesses.
_PERFECT = """
SELECT n.level, n.idx, CASE WHEN n.level = 0
    THEN (SELECT leaf_hash FROM log_leaves
          WHERE originator_node_id = $1 AND sequence_id = n.idx + 1)
    ELSE (SELECT hash FROM log_nodes
          WHERE originator_node_id = $1 AND level = n.level AND node_index = n.idx) END
FROM unnest($2::smallint[], $3::bigint[]) AS n(level, idx)
"""
_STORED_NODES = """
SELECT n.level, n.idx, t.hash
FROM unnest($2::smallint[], $3::bigint[]) AS n(level, idx)
JOIN log_nodes AS t
    ON t.originator_node_id = $1 AND t.level = n.level AND t.node_index = n.idx
"""
_INSERT_NODES = """
INSERT INTO log_nodes SELECT $1, * FROM unnest($2::smallint[], $3::bigint[], $4::bytea[])
ON CONFLICT DO NOTHING
"""
_INSERT_FINGERPRINTED_NODES = """
INSERT INTO log_nodes
SELECT $1, * FROM unnest($2::smallint[], $3::bigint[], $4::bytea[], $5::bigint[])
ON CONFLICT DO NOTHING
"""
# A range's fingerprint: its complete tiles' stored fingerprints (log_nodes at level
# STORED_MIN_LEVEL = 4: leaves 16t+1..16t+16), plus the leaves of the edges and of the tiles
# inside it that are incomplete (or not fingerprinted yet). Tiles t_lo..t_hi are those
# wholly inside the range, clamped to the highest leaf held (the open tail range).
_FINGERPRINTS = """
WITH r AS (
    SELECT i, first_id, last_id, (first_id + 14) / 16 AS t_lo, least(last_id, top) / 16 - 1 AS t_hi
    FROM unnest($2::bigint[], $3::bigint[]) WITH ORDINALITY AS r(first_id, last_id, i),
        (SELECT coalesce(max(sequence_id), 0) AS top FROM log_leaves
         WHERE originator_node_id = $1) AS held
)
SELECT r.i, t.count + l.count, t.xor # l.xor
FROM r
CROSS JOIN LATERAL (
    SELECT count(*) * 16, coalesce(bit_xor(fingerprint), 0) FROM log_nodes
    WHERE originator_node_id = $1 AND level = 4 AND node_index BETWEEN r.t_lo AND r.t_hi
        AND fingerprint IS NOT NULL
) AS t(count, xor)
CROSS JOIN LATERAL (
    SELECT count(*), coalesce(bit_xor(x.fingerprint), 0) FROM (
        SELECT fingerprint FROM log_leaves WHERE originator_node_id = $1
            AND sequence_id BETWEEN r.first_id AND least(r.last_id, r.t_lo * 16)
        UNION ALL
        SELECT fingerprint FROM log_leaves WHERE originator_node_id = $1
            AND sequence_id BETWEEN greatest(r.first_id, r.t_lo * 16 + 1, r.t_hi * 16 + 17)
                AND r.last_id
        UNION ALL
        SELECT v.fingerprint FROM generate_series(r.t_lo, r.t_hi) AS g(tile)
        CROSS JOIN LATERAL (
            SELECT fingerprint FROM log_leaves WHERE originator_node_id = $1
                AND sequence_id BETWEEN g.tile * 16 + 1 AND g.tile * 16 + 16
        ) AS v
        WHERE t.count < (r.t_hi - r.t_lo + 1) * 16  -- else every tile inside is complete
            AND NOT EXISTS (
                SELECT 1 FROM log_nodes WHERE originator_node_id = $1 AND level = 4
                    AND node_index = g.tile AND fingerprint IS NOT NULL
            )
    ) AS x
) AS l(count, xor)
ORDER BY r.i
"""
# Tiles stored without their fingerprint (the sequencer's own log) get it here, once.
_FILL_TILE_FINGERPRINTS = """
UPDATE log_nodes AS n SET fingerprint = (
    SELECT bit_xor(l.fingerprint) FROM log_leaves AS l WHERE l.originator_node_id = $1
        AND l.sequence_id BETWEEN n.node_index * 16 + 1 AND n.node_index * 16 + 16)
WHERE n.originator_node_id = $1 AND n.level = 4 AND n.fingerprint IS NULL
"""
_LEAVES_IN = """
SELECT l.sequence_id, l.leaf_hash
FROM unnest($2::bigint[], $3::bigint[]) AS r(first_id, last_id)
CROSS JOIN LATERAL (
    SELECT sequence_id, leaf_hash FROM log_leaves
    WHERE originator_node_id = $1 AND sequence_id BETWEEN r.first_id AND r.last_id
    OFFSET 0
) AS l
ORDER BY 1
"""
# Sequence ids of the ranges with no leaf held: only tiles without a stored subtree (so
# missing a leaf, or from before subtrees were kept past gaps) are looked into, leaf by leaf.
# Per range: index range scans and a small EXCEPT (a NOT EXISTS probe per tile and id was
# slow, and one join over all ranges was misestimated into a hash of many batches).
_ABSENT = """
SELECT i.s FROM unnest($2::bigint[], $3::bigint[]) AS r(first_id, last_id)
CROSS JOIN LATERAL (
    SELECT g.tile FROM generate_series((r.first_id - 1) / 16, (r.last_id - 1) / 16) AS g(tile)
    EXCEPT ALL
    SELECT node_index FROM log_nodes WHERE originator_node_id = $1 AND level = 4
        AND node_index BETWEEN (r.first_id - 1) / 16 AND (r.last_id - 1) / 16
) AS t
CROSS JOIN LATERAL (
    SELECT g.s FROM generate_series(
        greatest(r.first_id, t.tile * 16 + 1), least(r.last_id, t.tile * 16 + 16)) AS g(s)
    EXCEPT ALL
    SELECT sequence_id FROM log_leaves WHERE originator_node_id = $1
        AND sequence_id BETWEEN greatest(r.first_id, t.tile * 16 + 1)
            AND least(r.last_id, t.tile * 16 + 16)
) AS i
ORDER BY 1
"""
# Leaves held whose envelope is not, in the ranges, unless provably expired (leaf format 2,
# committed expiry passed; 0 = never). Format 1 leaves (expiry NULL) keep the rule of their
# time: a leaf kept alone was an expired envelope's. A merge of the two primary keys.
_LOST = """
SELECT l.sequence_id, l.leaf_hash
FROM unnest($2::bigint[], $3::bigint[]) AS r(first_id, last_id)
CROSS JOIN LATERAL (
    SELECT sequence_id, leaf_hash FROM log_leaves AS l
    WHERE l.originator_node_id = $1 AND l.sequence_id BETWEEN r.first_id AND r.last_id
        AND (l.expiry = 0 OR l.expiry > $4)
        AND NOT EXISTS (
            SELECT 1 FROM originator_envelopes AS e
            WHERE e.originator_node_id = $1 AND e.originator_sequence_id = l.sequence_id)
) AS l
ORDER BY 1 LIMIT $5
"""
_CHECKPOINT_COLUMNS = "signed"
_ACCEPTED = "FROM log_checkpoints WHERE originator_node_id = $1 AND conflict IS NULL"
_INSERT_CHECKPOINT = """
INSERT INTO log_checkpoints
    (originator_node_id, tree_size, root, originator_ns, previous_hash, signed, conflict)
VALUES ($1, $2, $3, $4, $5, $6, $7)
"""


def leaf_columns(envelopes: Sequence[IndexedEnvelope]) -> LeafColumns:
    """The log_leaves rows of the envelopes that belong to a committed log."""
    columns: LeafColumns = ([], [], [], [], [], [])
    for e in envelopes:
        if has_log(e.originator_node_id):
            leaf = e.leaf or envelope_leaf(e.raw)
            columns[0].append(e.originator_node_id)
            columns[1].append(e.sequence_id)
            columns[2].append(leaf)
            columns[3].append(fingerprint_part(leaf))
            columns[4].append(e.expiry)
            columns[5].append(content_hash_of(e.raw))
    return columns


def node_columns(
    completed: Sequence[tuple[int, int, bytes]],
) -> tuple[list[int], list[int], list[bytes]]:
    """log_nodes columns of what `Frontier.append` completed, low levels left out."""
    inner = [c for c in completed if c[0] >= STORED_MIN_LEVEL]
    return [c[0] for c in inner], [c[1] for c in inner], [c[2] for c in inner]


def _leaves_under(node: merkle.Node) -> list[merkle.Node]:
    level, index = node
    return [(0, i) for i in range(index << level, (index + 1) << level)]


async def perfect_hashes(
    conn: PgConnection | asyncpg.Pool, originator: int, nodes: Sequence[merkle.Node]
) -> dict[merkle.Node, bytes]:
    """The hashes of perfect subtrees, stored or hashed from their leaves, in one query."""
    if not nodes:
        return {}
    low = [n for n in nodes if 0 < n[0] < STORED_MIN_LEVEL]
    fetch = {n: None for n in nodes if n not in low}
    fetch.update((leaf, None) for n in low for leaf in _leaves_under(n))
    keys = list(fetch)
    rows = await conn.fetch(_PERFECT, originator, [n[0] for n in keys], [n[1] for n in keys])
    found = {(r[0], r[1]): r[2] for r in rows if r[2] is not None}
    missing = [n for n in keys if n not in found]
    if missing:
        raise merkle.ProofError(f"log {originator} lacks tree nodes {missing[:4]}")
    for n in low:
        found[n] = merkle.root_of([found[leaf] for leaf in _leaves_under(n)])
    return found


def _lookup(hashes: dict[merkle.Node, bytes]) -> merkle.PerfectHashes:
    return lambda level, index: hashes[(level, index)]


async def load_frontier(
    conn: PgConnection | asyncpg.Pool, originator: int, size: int
) -> merkle.Frontier:
    hashes = await perfect_hashes(conn, originator, merkle.Frontier.peaks_of(size))
    return merkle.Frontier.restored(size, _lookup(hashes))


async def _stored_nodes(
    conn: PgConnection, originator: int, nodes: Sequence[merkle.Node]
) -> dict[merkle.Node, bytes]:
    if not nodes:
        return {}
    rows = await conn.fetch(_STORED_NODES, originator, [n[0] for n in nodes], [n[1] for n in nodes])
    return {(r[0], r[1]): bytes(r[2]) for r in rows}


async def complete_subtrees(
    conn: PgConnection, originator: int, sequence_ids: Sequence[int]
) -> int:
    """Stores the perfect subtrees (level >= STORED_MIN_LEVEL) that the leaves at these
    sequence ids completed, anywhere in the log: their tiles (2^STORED_MIN_LEVEL leaves)
    now all held, joined upwards with complete neighbours. Three queries whatever the log's
    size. Returns how many subtrees it stored."""
    if not sequence_ids:
        return 0
    tile = 1 << STORED_MIN_LEVEL
    tiles = sorted({(s - 1) >> STORED_MIN_LEVEL for s in sequence_ids})
    rows = await conn.fetch(
        _LEAVES_IN, originator, [t * tile + 1 for t in tiles], [(t + 1) * tile for t in tiles]
    )
    by_tile: dict[int, list[bytes]] = {}
    for sequence_id, leaf in rows:
        by_tile.setdefault((sequence_id - 1) >> STORED_MIN_LEVEL, []).append(bytes(leaf))
    complete = {t: leaves for t, leaves in by_tile.items() if len(leaves) == tile}
    new = {(STORED_MIN_LEVEL, t): merkle.root_of(leaves) for t, leaves in complete.items()}
    if not new:
        return 0
    # Parents can reach as high as the log does, not only as the leaves just added (a fork
    # rewrites a leaf far below the log's end).
    held = await conn.fetchval(_HIGHEST_LEAF, originator)
    top = max(max(sequence_ids), held or 0).bit_length() + 1
    wanted = {s for n in new for s in merkle.path_siblings(n, top)} - new.keys()
    known = await _stored_nodes(conn, originator, sorted(wanted))
    made = list(merkle.join_complete(new, known).items())
    fingerprints = [
        Fingerprint.of(complete[i]).xor if level == STORED_MIN_LEVEL else None
        for (level, i), _ in made
    ]
    levels, indexes, hashes = node_columns([(*n, h) for n, h in made])
    await conn.execute(
        _INSERT_FINGERPRINTED_NODES, originator, levels, indexes, hashes, fingerprints
    )
    return len(made)


async def _jump(conn: PgConnection, originator: int, size: int) -> int:
    """The prefix grown over the largest stored subtree starting at leaf `size` (aligned to
    a tile), or `size` when none is stored there."""
    candidates = [
        (level, size >> level)
        for level in range(STORED_MIN_LEVEL, max(size.bit_length(), STORED_MIN_LEVEL) + 40)
        if size % (1 << level) == 0
    ]
    stored = await _stored_nodes(conn, originator, candidates)
    return size + (1 << max(stored)[0]) if stored else size


async def _hash_leaves(conn: PgConnection, originator: int, size: int, limit: int) -> int:
    """The prefix grown over up to `limit` held leaves after `size` by hashing them (storing
    the subtrees they complete); stops at a gap."""
    frontier = await load_frontier(conn, originator, size)
    rows = await conn.fetch(_LEAVES_AFTER, originator, size, limit)
    completed: list[tuple[int, int, bytes]] = []
    for sequence_id, leaf in rows:
        if sequence_id != frontier.size + 1:
            break  # a gap: the tree waits for it
        completed += frontier.append(leaf)
    if completed:
        await conn.execute(_INSERT_NODES, originator, *node_columns(completed))
    return frontier.size


async def extend_tree(
    conn: PgConnection, originator: int, added: Sequence[int] = ()
) -> merkle.Frontier:
    """Grows the originator's tree over the leaves that now follow its contiguous prefix;
    the caller owns the transaction. `added`: sequence ids of leaves just inserted, whose
    completed subtrees are stored first (wherever they are). Returns the tree's frontier."""
    size = await conn.fetchval(_LOCK_TREE, originator)
    await complete_subtrees(conn, originator, added)
    tile = 1 << STORED_MIN_LEVEL
    grown, chunk = size, tile
    while True:
        if grown % tile:  # to the next tile boundary, where stored subtrees start
            step = await _hash_leaves(conn, originator, grown, tile - grown % tile)
        else:
            step = await _jump(conn, originator, grown)
            if step == grown:  # a gap, the last partial tile, or leaves from before the rule
                step = await _hash_leaves(conn, originator, grown, chunk)
                if step - grown >= tile:  # leaves without stored subtrees: hash in chunks
                    chunk = EXTEND_CHUNK
        if step == grown:
            break
        grown = step
    if grown != size:
        await conn.execute(
            "UPDATE log_trees SET tree_size = $2 WHERE originator_node_id = $1",
            originator,
            grown,
        )
    return await load_frontier(conn, originator, grown)


async def extend_trees(
    conn: PgConnection,
    originators: Sequence[int],
    added: Sequence[tuple[int, int]] = (),
) -> None:
    """`extend_tree` for each originator; `added`: (originator, sequence id) of the leaves
    just inserted."""
    by_originator: dict[int, list[int]] = {}
    for originator, sequence_id in added:
        by_originator.setdefault(originator, []).append(sequence_id)
    for originator in sorted(set(originators)):  # one lock order: no deadlocks between batches
        if has_log(originator):
            await extend_tree(conn, originator, by_originator.get(originator, ()))


def _checkpoint(row: asyncpg.Record | None) -> Checkpoint | None:
    return None if row is None else parse_checkpoint(row[0])[0]


async def _insert_checkpoint(
    conn: PgConnection | asyncpg.Pool, c: Checkpoint, conflict: str | None
) -> None:
    await conn.execute(
        _INSERT_CHECKPOINT,
        c.originator_node_id,
        c.tree_size,
        c.root,
        c.originator_ns,
        c.previous_hash,
        c.signed,
        conflict,
    )


@driver_errors_translated
class LogStore:
    """The committed logs of every originator this node holds (usecases.logs.LogPort)."""

    def __init__(self, pool: asyncpg.Pool, topic_commitments: bool = True) -> None:
        """`topic_commitments`: checkpoints this node issues commit to its topic map."""
        self.pool = pool
        self._topics = topic_commitments

    async def tree_size(self, originator: int) -> int:
        size = await self.pool.fetchval(
            "SELECT tree_size FROM log_trees WHERE originator_node_id = $1", originator
        )
        return int(size or 0)

    async def highest_leaf(self, originator: int) -> int:
        return int(await self.pool.fetchval(_HIGHEST_LEAF, originator) or 0)

    async def perfect(
        self, originator: int, nodes: Sequence[merkle.Node]
    ) -> dict[merkle.Node, bytes]:
        return await perfect_hashes(self.pool, originator, nodes)

    async def fingerprints(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[Fingerprint]:
        await self.pool.execute(_FILL_TILE_FINGERPRINTS, originator)
        rows = await self.pool.fetch(
            _FINGERPRINTS, originator, [r.first for r in ranges], [r.last for r in ranges]
        )
        return [Fingerprint(r[1], r[2]) for r in rows]

    async def leaves(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[tuple[int, bytes]]:
        rows = await self.pool.fetch(
            _LEAVES_IN, originator, [r.first for r in ranges], [r.last for r in ranges]
        )
        return [(r[0], r[1]) for r in rows]

    async def absent(self, originator: int, ranges: Sequence[SequenceRange]) -> list[int]:
        rows = await self.pool.fetch(
            _ABSENT, originator, [r.first for r in ranges], [r.last for r in ranges]
        )
        return [r[0] for r in rows]

    async def lost(
        self, originator: int, ranges: Sequence[SequenceRange], now_unix: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """(sequence id, leaf) of the leaves in `ranges` held without their envelope and not
        provably expired at `now_unix` (xnode.core.leaves), at most `limit`, in order."""
        rows = await self.pool.fetch(
            _LOST,
            originator,
            [r.first for r in ranges],
            [r.last for r in ranges],
            now_unix,
            limit,
        )
        return [(r[0], bytes(r[1])) for r in rows]

    async def checkpoints(self, originator: int, after: int, limit: int) -> list[Checkpoint]:
        rows = await self.pool.fetch(
            f"SELECT {_CHECKPOINT_COLUMNS} {_ACCEPTED} AND tree_size > $2"
            " ORDER BY tree_size LIMIT $3",
            originator,
            after,
            limit,
        )
        return [parse_checkpoint(r[0])[0] for r in rows]

    async def latest_checkpoint(self, originator: int) -> Checkpoint | None:
        row = await self.pool.fetchrow(
            f"SELECT {_CHECKPOINT_COLUMNS} {_ACCEPTED} ORDER BY tree_size DESC LIMIT 1",
            originator,
        )
        return _checkpoint(row)

    async def checkpoint_at(self, originator: int, tree_size: int) -> Checkpoint | None:
        row = await self.pool.fetchrow(
            f"SELECT {_CHECKPOINT_COLUMNS} {_ACCEPTED} AND tree_size = $2", originator, tree_size
        )
        return _checkpoint(row)

    async def add_checkpoint(self, checkpoint: Checkpoint, conflict: str | None = None) -> bool:
        """Stores an accepted checkpoint (conflict None) or one kept aside; False when an
        accepted one of that size is already there."""
        try:
            await _insert_checkpoint(self.pool, checkpoint, conflict)
        except asyncpg.UniqueViolationError:
            return False
        return True

    async def checkpoints_between(
        self, originator: int, first_size: int, last_size: int
    ) -> list[StoredCheckpoint]:
        """Every checkpoint stored of `originator` (accepted or kept aside) with a tree size
        in [first_size, last_size], by tree size, then as stored."""
        rows = await self.pool.fetch(
            "SELECT id, signed, conflict FROM log_checkpoints WHERE originator_node_id = $1"
            " AND tree_size BETWEEN $2 AND $3 ORDER BY tree_size, id",
            originator,
            first_size,
            last_size,
        )
        return [StoredCheckpoint(r[0], parse_checkpoint(r[1])[0], r[2]) for r in rows]

    async def accepted_below(self, originator: int, tree_size: int) -> Checkpoint | None:
        row = await self.pool.fetchrow(
            f"SELECT {_CHECKPOINT_COLUMNS} {_ACCEPTED} AND tree_size < $2"
            " ORDER BY tree_size DESC LIMIT 1",
            originator,
            tree_size,
        )
        return _checkpoint(row)

    async def set_conflicts(self, changes: Sequence[tuple[int, str | None]]) -> None:
        """Sets each stored checkpoint's conflict (None: accepted) in one transaction, the
        ones kept aside first (one accepted checkpoint per tree size)."""
        ordered = sorted(changes, key=lambda c: c[1] is None)
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.executemany(
                "UPDATE log_checkpoints SET conflict = $2 WHERE id = $1", ordered
            )

    async def fork_leaves(self, originator: int, last: int) -> dict[int, list[bytes]]:
        """The leaf of every version kept as fork evidence, per sequence id up to `last`."""
        rows = await self.pool.fetch(
            "SELECT originator_sequence_id, envelope FROM sequence_forks"
            " WHERE originator_node_id = $1 AND originator_sequence_id <= $2"
            " ORDER BY 1, envelope_hash",
            originator,
            last,
        )
        found: dict[int, list[bytes]] = {}
        for r in rows:
            found.setdefault(r[0], []).append(envelope_leaf(bytes(r[1])))
        return found

    async def advance_topics(self, originator: int, size: int) -> TopicCommitment | None:
        async with self.pool.acquire() as conn, conn.transaction():
            return await advance_topics(conn, originator, size)

    async def conflicts(self, originator: int) -> list[tuple[Checkpoint, str]]:
        rows = await self.pool.fetch(
            "SELECT signed, conflict FROM log_checkpoints"
            " WHERE originator_node_id = $1 AND conflict IS NOT NULL ORDER BY id",
            originator,
        )
        return [(parse_checkpoint(r[0])[0], r[1]) for r in rows]

    async def issue(self, originator: int, sign: IssueSigner) -> Checkpoint | None:
        """Under a per-originator lock: when the tree grew past the latest checkpoint, signs
        the next one (`sign(size, root, previous, topics)`) and stores it; `topics`, the
        topic map brought up to the same size in the same transaction (None when off, or
        when an envelope of the range is not held: the map catches up at the next one)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", _ISSUE_LOCK, originator)
            size = await conn.fetchval(
                "SELECT tree_size FROM log_trees WHERE originator_node_id = $1", originator
            )
            previous = _checkpoint(
                await conn.fetchrow(
                    f"SELECT {_CHECKPOINT_COLUMNS} {_ACCEPTED} ORDER BY tree_size DESC LIMIT 1",
                    originator,
                )
            )
            if not size or (previous is not None and previous.tree_size >= size):
                return None
            hashes = await perfect_hashes(conn, originator, merkle.perfect_nodes_for_root(size))
            root = merkle.range_hash(0, size, _lookup(hashes))
            topics = await advance_topics(conn, originator, size) if self._topics else None
            checkpoint = sign(size, root, previous, topics)
            await _insert_checkpoint(conn, checkpoint, None)
            return checkpoint
