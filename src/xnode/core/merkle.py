"""The append-only Merkle tree an originator commits its log with (RFC 9162 section 2.1
shapes, Keccak-256 with the RFC's 0x00 / 0x01 leaf / node prefixes).

Leaves are the envelopes' leaf hashes in sequence order: leaf i is sequence id i + 1. The
tree of n leaves is the RFC's MTH: split at the largest power of two below n. Every node of
such a tree is a *perfect* subtree (2^level leaves starting at a multiple of 2^level) or is
built from perfect ones along the right edge, so an adapter needs to keep only perfect
subtree hashes (`Frontier.append` reports each one as it completes) to answer any root,
inclusion proof or consistency proof. The proof builders here take a `PerfectHashes`
lookup; `perfect_nodes_for_*` say which hashes to fetch first, so the store reads them in one
query and the maths stays free of I/O."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xnode.core.crypto import keccak256

HASH_LENGTH = 32
EMPTY_ROOT = keccak256(b"")

# (level, index) -> hash of leaves [index * 2**level, (index + 1) * 2**level)
PerfectHashes = Callable[[int, int], bytes]
Node = tuple[int, int]


class ProofError(ValueError):
    """A proof that does not hold, or a request for one that cannot exist."""


def leaf_hash(leaf: bytes) -> bytes:
    return keccak256(b"\x00", leaf)


def node_hash(left: bytes, right: bytes) -> bytes:
    return keccak256(b"\x01", left, right)


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH over already-hashed leaves: the reference the incremental forms are tested against."""
    n = len(leaf_hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaf_hashes[0]
    k = _split(n)
    return node_hash(root_of(leaf_hashes[:k]), root_of(leaf_hashes[k:]))


def range_hash(start: int, end: int, perfect: PerfectHashes) -> bytes:
    """MTH of leaves [start, end), where start is a multiple of the largest power of two not
    above end - start (true of every node of an RFC 9162 tree)."""
    n = end - start
    if n <= 0:
        raise ProofError(f"empty leaf range [{start}, {end})")
    if n & (n - 1) == 0 and start % n == 0:
        level = n.bit_length() - 1
        return perfect(level, start >> level)
    k = _split(n)
    return node_hash(range_hash(start, start + k, perfect), range_hash(start + k, end, perfect))


def inclusion_proof(index: int, size: int, perfect: PerfectHashes) -> list[bytes]:
    """RFC 9162 2.1.3.1 PATH(index, D[size])."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of {size} leaves")
    path: list[bytes] = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            path.append(range_hash(start + k, end, perfect))
            end = start + k
        else:
            path.append(range_hash(start, start + k, perfect))
            start += k
    path.reverse()
    return path


def consistency_proof(first: int, second: int, perfect: PerfectHashes) -> list[bytes]:
    """RFC 9162 2.1.4.1 PROOF(first, D[second]): the tree of `first` leaves is a prefix."""
    if not 0 < first <= second:
        raise ProofError(f"no consistency proof from {first} to {second} leaves")
    proof: list[bytes] = []
    start, end, m, whole = 0, second, first, True
    while m != end - start:
        k = _split(end - start)
        if m <= k:
            proof.append(range_hash(start + k, end, perfect))
            end = start + k
        else:
            proof.append(range_hash(start, start + k, perfect))
            start, m, whole = start + k, m - k, False
    if not whole:
        proof.append(range_hash(start, end, perfect))
    proof.reverse()
    return proof


def _recorded(build: Callable[[PerfectHashes], object]) -> list[Node]:
    seen: dict[Node, None] = {}

    def record(level: int, index: int) -> bytes:
        seen[(level, index)] = None
        return bytes(HASH_LENGTH)

    build(record)
    return list(seen)


def perfect_nodes_for_inclusion(index: int, size: int) -> list[Node]:
    return _recorded(lambda perfect: inclusion_proof(index, size, perfect))


def perfect_nodes_for_consistency(first: int, second: int) -> list[Node]:
    return _recorded(lambda perfect: consistency_proof(first, second, perfect))


def perfect_nodes_for_root(size: int) -> list[Node]:
    return _recorded(lambda perfect: range_hash(0, size, perfect)) if size else []


def _shift_while_even(fn: int, sn: int) -> tuple[int, int]:
    while not fn & 1 and fn:
        fn, sn = fn >> 1, sn >> 1
    return fn, sn


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """RFC 9162 2.1.3.2; `leaf` is the leaf hash. Raises ProofError when it does not hold."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of {size} leaves")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            fn, sn = _shift_while_even(fn, sn)
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0 or r != root:
        raise ProofError(f"leaf {index} is not in the tree of {size} leaves with that root")


def run_root(
    start: int,
    leaves: Sequence[bytes],
    size: int,
    first_proof: Sequence[bytes],
    last_proof: Sequence[bytes],
) -> bytes:
    """The root of the tree of `size` leaves whose leaves start..start+len(leaves)-1 are
    `leaves`, the rest given by the inclusion proofs of the run's first and last leaf: the
    subtrees left of the run are siblings on the first leaf's path, those right of it on the
    last leaf's. Equal to a signed root, it proves the whole run with two proofs (the repair
    of a gap checks thousands of envelopes with two round trips' worth of hashes)."""
    first, last = start, start + len(leaves) - 1
    if not leaves or not 0 <= first <= last < size:
        raise ProofError(f"leaves {first}..{last} are not a run in a tree of {size}")
    left, right = list(reversed(first_proof)), list(reversed(last_proof))

    def sibling(path: list[bytes], depth: int) -> bytes:
        if depth >= len(path):
            raise ProofError("an inclusion proof is shorter than the tree is deep")
        return path[depth]

    def hash_of(lo: int, hi: int, depth: int) -> bytes:
        if first <= lo and hi - 1 <= last:
            return root_of(leaves[lo - first : hi - first])
        mid = lo + _split(hi - lo)
        if last < mid:
            return node_hash(hash_of(lo, mid, depth + 1), sibling(right, depth))
        if first >= mid:
            return node_hash(sibling(left, depth), hash_of(mid, hi, depth + 1))
        return node_hash(hash_of(lo, mid, depth + 1), hash_of(mid, hi, depth + 1))

    return hash_of(0, size, 0)


def verify_consistency(
    first: int, second: int, proof: Sequence[bytes], first_root: bytes, second_root: bytes
) -> None:
    """RFC 9162 2.1.4.2. Raises ProofError when the first tree is not a prefix of the second."""
    if not 0 < first <= second:
        raise ProofError(f"no consistency proof from {first} to {second} leaves")
    if first == second:
        if proof or first_root != second_root:
            raise ProofError("equal sizes with different roots or a non-empty proof")
        return
    path = list(proof)
    if first & (first - 1) == 0:
        path.insert(0, first_root)
    if not path:
        raise ProofError("empty consistency proof")
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            fn, sn = _shift_while_even(fn, sn)
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0 or fr != first_root or sr != second_root:
        raise ProofError(f"the tree of {first} leaves is not a prefix of the one of {second}")


def path_siblings(node: Node, top_level: int) -> list[Node]:
    """The siblings of `node` and of its ancestors below `top_level`: what joining a newly
    complete subtree with its neighbours needs."""
    level, index = node
    siblings = []
    while level < top_level:
        siblings.append((level, index ^ 1))
        level, index = level + 1, index >> 1
    return siblings


def join_complete(new: dict[Node, bytes], known: dict[Node, bytes]) -> dict[Node, bytes]:
    """Perfect subtrees made by joining the newly complete ones (`new`) with each other and
    with complete neighbours (`known`), level by level: the parents whose both halves are
    complete. Returns `new` with every parent made (a gap filled anywhere in a log only
    recomputes the paths above it, whatever lies beyond the log's contiguous prefix)."""
    made = dict(new)
    frontier = set(new)
    while frontier:
        parents: set[Node] = set()
        for level, index in frontier:
            parent = (level + 1, index >> 1)
            if parent in made or parent in known:
                continue
            left, right = (level, index & ~1), (level, index | 1)
            left_hash = made.get(left) or known.get(left)
            right_hash = made.get(right) or known.get(right)
            if left_hash is not None and right_hash is not None:
                made[parent] = node_hash(left_hash, right_hash)
                parents.add(parent)
        frontier = parents
    return made


@dataclass
class Frontier:
    """The right edge of the tree (its perfect-subtree peaks): enough to append and to give
    the root, in O(log n) memory. Restored from the store by `peaks_of(size)`."""

    size: int = 0
    peaks: list[bytes] = field(default_factory=list)

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Adds one leaf hash; returns the perfect subtrees it completed as (level, index,
        hash), the leaf itself first, for the store to keep."""
        index = self.size
        completed = [(0, index, leaf)]
        self.peaks.append(leaf)
        level = 0
        while index & 1:
            right = self.peaks.pop()
            left = self.peaks.pop()
            merged = node_hash(left, right)
            level, index = level + 1, index >> 1
            self.peaks.append(merged)
            completed.append((level, index, merged))
        self.size += 1
        return completed

    def extend(self, leaves: Sequence[bytes], min_level: int) -> list[tuple[int, int, bytes]]:
        """`append` for many leaves, returning only the completed subtrees of `min_level` and
        up: the sequencer's batch path (the store keeps no lower ones), without a tuple and
        a list per leaf that `append` makes for callers wanting every node."""
        size, peaks = self.size, self.peaks
        kept: list[tuple[int, int, bytes]] = []
        for leaf in leaves:
            index, level = size, 0
            if min_level <= 0:
                kept.append((0, index, leaf))
            peaks.append(leaf)
            while index & 1:
                right = peaks.pop()
                merged = node_hash(peaks.pop(), right)
                level, index = level + 1, index >> 1
                peaks.append(merged)
                if level >= min_level:
                    kept.append((level, index, merged))
            size += 1
        self.size = size
        return kept

    def root(self) -> bytes:
        if not self.peaks:
            return EMPTY_ROOT
        root = self.peaks[-1]
        for peak in reversed(self.peaks[:-1]):
            root = node_hash(peak, root)
        return root

    @staticmethod
    def peaks_of(size: int) -> list[Node]:
        """The (level, index) of each peak of a tree of `size` leaves, left to right."""
        nodes: list[Node] = []
        start = 0
        for level in reversed(range(size.bit_length())):
            if size >> level & 1:
                nodes.append((level, start >> level))
                start += 1 << level
        return nodes

    @classmethod
    def restored(cls, size: int, perfect: PerfectHashes) -> Frontier:
        return cls(size, [perfect(level, index) for level, index in cls.peaks_of(size)])
