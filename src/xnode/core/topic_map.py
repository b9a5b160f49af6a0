"""Per-topic commitments and completeness proofs (docs/proofs.md, "Completeness proofs").

Per originator, every topic has its own small log: the originator's envelopes of that topic
in sequence order, each entry (sequence id, expiry, content hash), hashed as an RFC 9162
tree (xnode.core.merkle). A sparse Merkle map from sha256(topic) to that log's head (size,
root) commits to all of them at once; its root goes into the originator's checkpoint.

The map is a binary tree over the 256 bits of the key in which a subtree holding a single
leaf *is* that leaf (Diem's sparse Merkle tree): a leaf sits at the shallowest depth where
it is alone, so paths are about log2(topics) deep, not 256. Its nodes are of three kinds:
empty (32 zero bytes), a leaf `keccak256(0x00 || key || value)` and an inner node
`keccak256(0x01 || left || right)` with at least two leaves under it. A proof for a key is
the siblings down to where the key's path ends, at an empty subtree (absent), at the
key's leaf (present, with its value) or at another key's leaf sharing the path (absent).

Storage (xnode.store.topics) keeps the top `BUCKET_DEPTH` levels node by node and computes
the few levels below from a bucket's leaves (a range of keys), so a change re-hashes one
bucket and `BUCKET_DEPTH` nodes above it; `SparseMap` is the same maths in memory."""

from __future__ import annotations

import bisect
import hashlib
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from xnode.core import merkle
from xnode.core.crypto import keccak256
from xnode.core.leaves import opened_leaf_v2
from xnode.core.retention import is_expired

TOPIC_MAP_FORMAT = 1  # what a checkpoint's TopicCommitment.format names
KEY_BITS = 256
BUCKET_DEPTH = 20  # 2^20 buckets: about 10 topics each at 10,000,000 topics
EMPTY = bytes(merkle.HASH_LENGTH)

ProofError = merkle.ProofError


def topic_key(topic: bytes) -> bytes:
    return hashlib.sha256(topic).digest()


def map_leaf_hash(key: bytes, value: bytes) -> bytes:
    return keccak256(b"\x00", key, value)


def map_node_hash(left: bytes, right: bytes) -> bytes:
    return keccak256(b"\x01", left, right)


def head_value(size: int, root: bytes) -> bytes:
    """The map's value for a topic: the head of its log."""
    return keccak256(b"topic-log|", size.to_bytes(8, "big"), root)


def bit(key: bytes, depth: int) -> int:
    return key[depth >> 3] >> (7 - (depth & 7)) & 1


def prefix(key: bytes, depth: int) -> int:
    """The key's first `depth` bits as an integer: its subtree's index at that depth."""
    return int.from_bytes(key, "big") >> (KEY_BITS - depth)


def bucket_of(key: bytes) -> int:
    return prefix(key, BUCKET_DEPTH)


def node_range(depth: int, index: int) -> tuple[bytes, bytes]:
    """The lowest and highest key under a node (both included)."""
    shift = KEY_BITS - depth
    low = index << shift
    return low.to_bytes(32, "big"), (low | ((1 << shift) - 1)).to_bytes(32, "big")


@dataclass(frozen=True, slots=True)
class MapNode:
    """A subtree: its hash, and its only leaf (key, value) when it holds exactly one."""

    hash: bytes
    leaves: int  # 0, 1, or 2 for two or more
    leaf: tuple[bytes, bytes] | None = None


EMPTY_NODE = MapNode(EMPTY, 0)
Leaf = tuple[bytes, bytes]  # (key, value)
NodeIndex = tuple[int, int]  # (depth, index at that depth)


def leaf_node(key: bytes, value: bytes) -> MapNode:
    return MapNode(map_leaf_hash(key, value), 1, (key, value))


def combine(left: MapNode, right: MapNode) -> MapNode:
    if left.leaves + right.leaves <= 1:  # a single leaf (or nothing) moves up
        return left if left.leaves else right
    return MapNode(map_node_hash(left.hash, right.hash), 2)


def subtree(leaves: Sequence[Leaf], depth: int) -> MapNode:
    """The node over `leaves` (sorted by key, all sharing their first `depth` bits)."""
    if not leaves:
        return EMPTY_NODE
    if len(leaves) == 1:
        return leaf_node(*leaves[0])
    split = bisect.bisect_left(leaves, 1, key=lambda leaf: bit(leaf[0], depth))
    return combine(subtree(leaves[:split], depth + 1), subtree(leaves[split:], depth + 1))


def _under(leaves: Sequence[Leaf], depth: int, index: int) -> Sequence[Leaf]:
    """The leaves (sorted) whose first `depth` bits are `index`."""
    keys = [prefix(k, depth) for k, _ in leaves]
    return leaves[bisect.bisect_left(keys, index) : bisect.bisect_right(keys, index)]


# (depth, index) -> node, for depths 0..BUCKET_DEPTH (EMPTY_NODE where nothing is stored)
TopNodes = Callable[[int, int], MapNode]


def siblings_for_update(buckets: Iterable[int]) -> list[NodeIndex]:
    """The top nodes re-hashing these buckets' paths needs (the store reads them at once):
    the siblings along the paths that are not on a path themselves (those are re-hashed
    first, and read as they were they would be stale)."""
    paths: set[NodeIndex] = set()
    for bucket in buckets:
        for depth in range(BUCKET_DEPTH, 0, -1):
            paths.add((depth, bucket >> (BUCKET_DEPTH - depth)))
    return sorted({(depth, index ^ 1) for depth, index in paths} - paths)


def updated_top(changed: Mapping[int, MapNode], top: TopNodes) -> dict[NodeIndex, MapNode]:
    """The top nodes made by setting these buckets' nodes: the buckets and every ancestor
    up to the root (0, 0). `top` answers for the unchanged siblings."""
    made: dict[NodeIndex, MapNode] = {(BUCKET_DEPTH, b): n for b, n in changed.items()}
    level = set(changed)
    for depth in range(BUCKET_DEPTH, 0, -1):
        parents: set[int] = set()
        for index in level:
            parent = index >> 1
            if parent in parents:
                continue
            left, right = ((depth, parent << 1), (depth, parent << 1 | 1))
            made[(depth - 1, parent)] = combine(
                made.get(left) or top(*left), made.get(right) or top(*right)
            )
            parents.add(parent)
        level = parents
    return made


def top_nodes_for_proof(key: bytes) -> list[NodeIndex]:
    """The top nodes a proof of `key` reads: its path and the siblings along it."""
    nodes = [(0, 0)]
    for depth in range(1, BUCKET_DEPTH + 1):
        index = prefix(key, depth)
        nodes += [(depth, index), (depth, index ^ 1)]
    return nodes


@dataclass(frozen=True)
class MapProof:
    """The siblings from the root down to where `key`'s path ends (EMPTY for empty ones),
    and the leaf there, if any (None: an empty subtree)."""

    siblings: tuple[bytes, ...]
    leaf: Leaf | None

    def bitmap(self) -> bytes:
        """Which siblings are not empty, bit i (most significant first) for depth i + 1:
        only those are sent."""
        bits = 0
        for i, sibling in enumerate(self.siblings):
            if sibling != EMPTY:
                bits |= 1 << (8 * ((len(self.siblings) + 7) // 8) - 1 - i)
        return bits.to_bytes((len(self.siblings) + 7) // 8, "big")

    def non_empty(self) -> list[bytes]:
        return [s for s in self.siblings if s != EMPTY]

    @classmethod
    def from_compressed(
        cls, depth: int, bitmap: bytes, non_empty: Sequence[bytes], leaf: Leaf | None
    ) -> MapProof:
        if not 0 <= depth <= KEY_BITS or len(bitmap) != (depth + 7) // 8:
            raise ProofError(f"a map proof of depth {depth} needs a {(depth + 7) // 8}-byte bitmap")
        given = iter(non_empty)
        siblings = []
        for i in range(depth):
            if bitmap[i >> 3] >> (7 - (i & 7)) & 1:
                sibling = next(given, None)
                if sibling is None or len(sibling) != merkle.HASH_LENGTH:
                    raise ProofError("a map proof's bitmap names more siblings than it holds")
                siblings.append(sibling)
            else:
                siblings.append(EMPTY)
        if next(given, None) is not None:
            raise ProofError("a map proof holds more siblings than its bitmap names")
        return cls(tuple(siblings), leaf)


def prove_key(key: bytes, top: TopNodes, bucket: Sequence[Leaf]) -> MapProof:
    """The proof for `key` from the top nodes and its bucket's leaves (sorted)."""

    def node(depth: int, index: int) -> MapNode:
        if depth <= BUCKET_DEPTH:
            return top(depth, index)
        return subtree(_under(bucket, depth, index), depth)

    siblings: list[bytes] = []
    depth = 0
    current = node(0, 0)
    while current.leaves > 1:
        index = prefix(key, depth + 1)
        siblings.append(node(depth + 1, index ^ 1).hash)
        depth += 1
        current = node(depth, index)
    return MapProof(tuple(siblings), current.leaf)


def verify_key(root: bytes, key: bytes, proof: MapProof) -> bytes | None:
    """The value the map of `root` holds for `key`, None when it holds none; raises
    ProofError when the proof does not lead to `root`."""
    depth = len(proof.siblings)
    if proof.leaf is None:
        current = EMPTY
    else:
        other, value = proof.leaf
        if len(other) != 32 or len(value) != merkle.HASH_LENGTH:
            raise ProofError("a map proof's leaf needs a 32-byte key and value")
        if depth and prefix(other, depth) != prefix(key, depth):
            raise ProofError("the map proof's leaf is not on the key's path")
        current = map_leaf_hash(other, value)
    for i in reversed(range(depth)):
        sibling = proof.siblings[i]
        current = (
            map_node_hash(sibling, current) if bit(key, i) else map_node_hash(current, sibling)
        )
    if current != root:
        raise ProofError("the map proof does not lead to the committed root")
    if proof.leaf is None or proof.leaf[0] != key:
        return None
    return proof.leaf[1]


@dataclass
class SparseMap:
    """The map in memory, with the store's layout: top nodes by (depth, index), leaves by
    bucket. For tests, benchmarks and small maps."""

    top: dict[NodeIndex, MapNode] = field(default_factory=dict)
    buckets: dict[int, dict[bytes, bytes]] = field(default_factory=dict)

    def node(self, depth: int, index: int) -> MapNode:
        return self.top.get((depth, index), EMPTY_NODE)

    def bucket_leaves(self, bucket: int) -> list[Leaf]:
        return sorted(self.buckets.get(bucket, {}).items())

    def set(self, values: Mapping[bytes, bytes]) -> None:
        for key, value in values.items():
            self.buckets.setdefault(bucket_of(key), {})[key] = value
        changed = {b: subtree(self.bucket_leaves(b), BUCKET_DEPTH) for b in map(bucket_of, values)}
        self.top.update(updated_top(changed, self.node))

    def root(self) -> bytes:
        return self.node(0, 0).hash

    def prove(self, key: bytes) -> MapProof:
        return prove_key(key, self.node, self.bucket_leaves(bucket_of(key)))


@dataclass(frozen=True, slots=True)
class TopicEntry:
    """One envelope of a topic's log: its sequence id and the opening of its leaf."""

    sequence_id: int
    expiry: int  # expiry_unixtime, 0: never
    content_hash: bytes  # keccak256 of the unsigned originator envelope

    @property
    def log_leaf(self) -> bytes:
        """The envelope's leaf in the originator's log (leaf format 2)."""
        return opened_leaf_v2(self.content_hash, self.expiry)

    @property
    def hash(self) -> bytes:
        """The entry's leaf hash in the topic's log."""
        return merkle.leaf_hash(self.sequence_id.to_bytes(8, "big") + self.log_leaf)


def _perfect(hashes: Sequence[bytes]) -> merkle.PerfectHashes:
    return lambda level, index: merkle.root_of(hashes[index << level : (index + 1) << level])


@dataclass(frozen=True)
class TopicProof:
    """Topic T's entries after a cursor, up to a checkpoint: the map proof of T's log head,
    and a run of T's log from the entry at or below the cursor (or the first) to the end
    (or as far as an answer holds), with the inclusion paths of its first and last entry."""

    topic: bytes
    map_proof: MapProof
    log_size: int
    log_root: bytes
    start: int  # the run's first index in T's log
    entries: tuple[TopicEntry, ...]
    first_path: tuple[bytes, ...]
    last_path: tuple[bytes, ...]


@dataclass(frozen=True)
class Completeness:
    """What a verified TopicProof says: these are all the topic's entries after the cursor
    with sequence ids up to `through`."""

    entries: tuple[TopicEntry, ...]
    through: int


def prove_topic(
    topic: bytes, after: int, map_proof: MapProof, log: Sequence[TopicEntry], limit: int
) -> TopicProof:
    """The proof of `topic`'s entries after sequence id `after`, from its whole log (in
    order), at most `limit` of them."""
    if not log:
        return TopicProof(topic, map_proof, 0, merkle.EMPTY_ROOT, 0, (), (), ())
    hashes = [e.hash for e in log]
    first_after = bisect.bisect_right([e.sequence_id for e in log], after)
    start = max(first_after - 1, 0)
    end = max(min(len(log), first_after + limit), start + 1)
    perfect = _perfect(hashes)
    return TopicProof(
        topic,
        map_proof,
        len(log),
        merkle.root_of(hashes),
        start,
        tuple(log[start:end]),
        tuple(merkle.inclusion_proof(start, len(log), perfect)),
        tuple(merkle.inclusion_proof(end - 1, len(log), perfect)),
    )


def verify_topic(map_root: bytes, tree_size: int, after: int, proof: TopicProof) -> Completeness:
    """Checks `proof` against the map root of a checkpoint of `tree_size` envelopes: returns
    the entries after `after` it proves complete; raises ProofError when it does not hold."""
    value = verify_key(map_root, topic_key(proof.topic), proof.map_proof)
    if value is None:
        if proof.log_size or proof.entries:
            raise ProofError("the map holds no log for this topic, yet the proof shows one")
        return Completeness((), tree_size)
    if value != head_value(proof.log_size, proof.log_root):
        raise ProofError("the topic log's size and root are not the map's")
    if not proof.entries:
        raise ProofError("a proof of a topic with a log shows none of its entries")
    ids = [e.sequence_id for e in proof.entries]
    if any(b <= a for a, b in itertools.pairwise(ids)) or ids[-1] > tree_size:
        raise ProofError("the topic log's sequence ids must grow, within the checkpoint")
    root = merkle.run_root(
        proof.start,
        [e.hash for e in proof.entries],
        proof.log_size,
        proof.first_path,
        proof.last_path,
    )
    if root != proof.log_root:
        raise ProofError("the entries are not a run of the topic's committed log")
    newer = tuple(e for e in proof.entries if e.sequence_id > after)
    if proof.start > 0 and len(newer) == len(proof.entries):
        raise ProofError("the run does not start at or below the cursor: entries before it hidden")
    ends_log = proof.start + len(proof.entries) == proof.log_size
    return Completeness(newer, tree_size if ends_log else ids[-1])


@dataclass(frozen=True)
class Served:
    """An envelope a node served: its sequence id and the opening of its leaf."""

    sequence_id: int
    expiry: int
    content_hash: bytes


@dataclass(frozen=True)
class Omissions:
    """Entries a proof shows and an answer lacks: omitted (not expired at the answer's
    time) and expired (provably gone); served envelopes the proof does not commit to."""

    omitted: tuple[TopicEntry, ...]
    expired: tuple[TopicEntry, ...]
    uncommitted: tuple[int, ...]


def compare(complete: Completeness, served: Sequence[Served], now_unix: int) -> Omissions:
    """What an answer serving `served` leaves out of what `complete` proves."""
    by_id = {s.sequence_id: s for s in served}
    omitted, expired = [], []
    for entry in complete.entries:
        got = by_id.pop(entry.sequence_id, None)
        if got is not None and (got.expiry, got.content_hash) == (entry.expiry, entry.content_hash):
            continue
        if got is None and is_expired(entry.expiry, now_unix):
            expired.append(entry)
        else:
            omitted.append(entry)
    uncommitted = tuple(i for i in sorted(by_id) if i <= complete.through)
    return Omissions(tuple(omitted), tuple(expired), uncommitted)
