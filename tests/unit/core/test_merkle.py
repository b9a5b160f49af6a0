"""The log accumulator against its reference definition (RFC 9162 MTH), with properties:
every honest proof verifies, and no proof verifies for another leaf, index, size or root."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xnode.core.crypto import keccak256
from xnode.core.merkle import (
    EMPTY_ROOT,
    Frontier,
    PerfectHashes,
    ProofError,
    consistency_proof,
    inclusion_proof,
    join_complete,
    leaf_hash,
    path_siblings,
    perfect_nodes_for_consistency,
    perfect_nodes_for_inclusion,
    perfect_nodes_for_root,
    range_hash,
    root_of,
    run_root,
    verify_consistency,
    verify_inclusion,
)


def leaves(n: int) -> list[bytes]:
    return [leaf_hash(i.to_bytes(8, "big")) for i in range(n)]


def built(n: int) -> tuple[Frontier, dict[tuple[int, int], bytes]]:
    frontier = Frontier()
    stored: dict[tuple[int, int], bytes] = {}
    for leaf in leaves(n):
        for level, index, digest in frontier.append(leaf):
            stored[(level, index)] = digest
    return frontier, stored


sizes = st.integers(1, 300)


def lookup(nodes: dict[tuple[int, int], bytes]) -> PerfectHashes:
    return lambda level, index: nodes[(level, index)]


def test_known_shapes() -> None:
    a, b, c = leaves(3)
    assert root_of([]) == EMPTY_ROOT == Frontier().root()
    assert root_of([a]) == a
    assert root_of([a, b, c]) == keccak256(b"\x01", keccak256(b"\x01", a, b), c)
    assert leaf_hash(b"x") == keccak256(b"\x00x")


@settings(max_examples=150, deadline=None)
@given(sizes)
def test_frontier_root_and_range_hash_match_the_reference(n: int) -> None:
    frontier, stored = built(n)
    assert frontier.root() == root_of(leaves(n))
    assert range_hash(0, n, lookup(stored)) == frontier.root()
    assert Frontier.restored(n, lookup(stored)).root() == frontier.root()
    # Each leaf completes at most log2(n) + 1 subtrees; 2n - 1 nodes in all for a power of 2.
    assert len(stored) < 2 * n


@settings(max_examples=100, deadline=None)
@given(sizes, st.data())
def test_extend_equals_append_keeping_only_high_levels(n: int, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, n), label="leaves before the batch")
    min_level = data.draw(st.integers(0, 5), label="min_level")
    appended, extended = Frontier(), Frontier()
    for leaf in leaves(start):
        appended.append(leaf)
        extended.append(leaf)
    batch = leaves(n)[start:]
    completed = [c for leaf in batch for c in appended.append(leaf) if c[0] >= min_level]
    assert extended.extend(batch, min_level) == completed
    assert (
        (extended.size, extended.peaks) == (appended.size, appended.peaks) == (n, built(n)[0].peaks)
    )


@settings(max_examples=150, deadline=None)
@given(sizes, st.data())
def test_every_inclusion_proof_verifies_and_only_for_its_leaf(n: int, data: st.DataObject) -> None:
    frontier, stored = built(n)
    root = frontier.root()
    index = data.draw(st.integers(0, n - 1))
    needed = perfect_nodes_for_inclusion(index, n)
    proof = inclusion_proof(index, n, lookup({k: stored[k] for k in needed}))
    assert len(proof) <= n.bit_length()
    leaf = leaves(n)[index]
    verify_inclusion(leaf, index, n, proof, root)
    with pytest.raises(ProofError):
        verify_inclusion(leaf_hash(b"other"), index, n, proof, root)
    if n > 1:
        other = (index + 1) % n
        with pytest.raises(ProofError):
            verify_inclusion(leaf, other, n, proof, root)
    with pytest.raises(ProofError):
        verify_inclusion(leaf, index, n, proof, leaf_hash(b"another root"))
    if proof:
        tampered = [*proof[:-1], bytes(32)]
        with pytest.raises(ProofError):
            verify_inclusion(leaf, index, n, tampered, root)


@settings(max_examples=150, deadline=None)
@given(sizes, st.data())
def test_every_consistency_proof_verifies_and_forks_do_not(n: int, data: st.DataObject) -> None:
    first = data.draw(st.integers(1, n))
    old, _ = built(first)
    new, stored = built(n)
    needed = perfect_nodes_for_consistency(first, n)
    proof = consistency_proof(first, n, lookup({k: stored[k] for k in needed}))
    verify_consistency(first, n, proof, old.root(), new.root())
    # A log that rewrote any earlier leaf (a fork) is not consistent with the old root.
    forked = leaves(n)
    forked[data.draw(st.integers(0, first - 1))] = leaf_hash(b"rewritten")
    with pytest.raises(ProofError):
        verify_consistency(first, n, proof, old.root(), root_of(forked))
    if first < n:
        with pytest.raises(ProofError):
            verify_consistency(first, n, proof, root_of(forked[:first]), new.root())


def test_nodes_for_root_are_the_peaks() -> None:
    assert perfect_nodes_for_root(0) == []
    assert perfect_nodes_for_root(13) == Frontier.peaks_of(13) == [(3, 0), (2, 2), (0, 12)]


def test_impossible_requests_are_refused() -> None:
    _, stored = built(4)
    with pytest.raises(ProofError):
        inclusion_proof(4, 4, lookup(stored))
    with pytest.raises(ProofError):
        consistency_proof(5, 4, lookup(stored))
    with pytest.raises(ProofError):
        verify_consistency(0, 4, [], EMPTY_ROOT, EMPTY_ROOT)


@given(st.integers(1, 300), st.data())
def test_a_run_of_leaves_is_proven_by_its_two_boundary_proofs(n: int, data: st.DataObject) -> None:
    _, nodes = built(n)
    all_leaves = leaves(n)
    first = data.draw(st.integers(0, n - 1))
    last = data.draw(st.integers(first, n - 1))
    first_proof = inclusion_proof(first, n, lookup(nodes))
    last_proof = inclusion_proof(last, n, lookup(nodes))
    run = all_leaves[first : last + 1]
    assert run_root(first, run, n, first_proof, last_proof) == root_of(all_leaves)
    forged = [*run[:-1], leaf_hash(b"forged")]
    assert run_root(first, forged, n, first_proof, last_proof) != root_of(all_leaves)


def complete_subtrees_of(
    held: set[int], hashes: list[bytes], min_level: int
) -> dict[tuple[int, int], bytes]:
    """Every perfect subtree (level >= min_level) whose leaves are all held: the reference."""
    out = {}
    level = min_level
    while (1 << level) <= len(hashes):
        width = 1 << level
        for index in range(len(hashes) // width):
            if all(i in held for i in range(index * width, (index + 1) * width)):
                out[(level, index)] = root_of(hashes[index * width : (index + 1) * width])
        level += 1
    return out


@given(st.integers(1, 200), st.integers(0, 3), st.data())
@settings(max_examples=60)
def test_joining_completed_tiles_keeps_every_complete_subtree_past_gaps(
    n: int, min_level: int, data: st.DataObject
) -> None:
    """Leaves arrive in any order, in batches, with gaps; after each batch the tiles it
    completed are joined with what is stored: what is stored is then exactly every perfect
    subtree whose leaves are all held, past gaps too, with the reference hashes."""
    hashes = leaves(n)
    order = data.draw(st.permutations(range(n)))
    cut = data.draw(st.lists(st.integers(0, n), max_size=6))
    held: set[int] = set()
    stored: dict[tuple[int, int], bytes] = {}
    bounds = sorted({0, n, *cut})
    for lo, hi in itertools.pairwise(bounds):
        held.update(order[lo:hi])
        width = 1 << min_level
        tiles = {i >> min_level for i in order[lo:hi]}
        new = {
            (min_level, t): root_of(hashes[t * width : (t + 1) * width])
            for t in tiles
            if all(i in held for i in range(t * width, (t + 1) * width)) and (t + 1) * width <= n
        }
        top = n.bit_length() + 1
        wanted = {s for node in new for s in path_siblings(node, top)} - new.keys()
        known = {s: stored[s] for s in wanted if s in stored}
        stored.update(join_complete(new, known))
        assert stored == complete_subtrees_of(held, hashes, min_level)


def test_path_siblings_climb_to_the_top_level() -> None:
    assert path_siblings((4, 5), 7) == [(4, 4), (5, 3), (6, 0)]
    assert path_siblings((3, 0), 3) == []
