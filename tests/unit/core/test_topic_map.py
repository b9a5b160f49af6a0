"""Per-topic commitments: the bucketed map against its reference (one recursive hash over
every leaf), and the properties of proofs: every honest proof verifies; a dropped, added,
reordered or altered entry, or a wrong map proof, never does."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xnode.core.crypto import keccak256
from xnode.core.topic_map import (
    BUCKET_DEPTH,
    EMPTY,
    MapProof,
    ProofError,
    Served,
    SparseMap,
    TopicEntry,
    TopicProof,
    bucket_of,
    compare,
    head_value,
    prove_topic,
    siblings_for_update,
    subtree,
    topic_key,
    updated_top,
    verify_key,
    verify_topic,
)

# Keys sharing long prefixes, so paths go below the bucket depth and leaves share buckets.
_PREFIXES = [bytes(3), b"\x00\x00\x0f", b"\xff\xff\xf0", b"\x80\x00\x00"]
keys = st.builds(
    lambda p, tail: p + tail, st.sampled_from(_PREFIXES), st.binary(min_size=29, max_size=29)
)
maps = st.dictionaries(keys, st.binary(min_size=32, max_size=32), max_size=24)


def built(values: dict[bytes, bytes], batches: int = 2) -> SparseMap:
    m = SparseMap()
    items = list(values.items())
    for i in range(batches):
        m.set(dict(items[i::batches]))
    return m


@given(maps, st.integers(1, 3))
def test_bucketed_root_is_the_reference_root(values: dict[bytes, bytes], batches: int) -> None:
    reference = subtree(sorted(values.items()), 0).hash
    assert built(values, batches).root() == reference


@given(maps, keys)
def test_honest_map_proofs_verify(values: dict[bytes, bytes], other: bytes) -> None:
    m = built(values)
    for key, value in values.items():
        assert verify_key(m.root(), key, m.prove(key)) == value
    if other not in values:
        assert verify_key(m.root(), other, m.prove(other)) is None


@given(maps, st.data())
def test_altered_map_proofs_fail(values: dict[bytes, bytes], data: st.DataObject) -> None:
    m = built(values)
    key = data.draw(st.sampled_from(sorted(values)) if values else keys)
    proof = m.prove(key)
    compressed = MapProof.from_compressed(
        len(proof.siblings), proof.bitmap(), proof.non_empty(), proof.leaf
    )
    assert compressed == proof
    if proof.siblings:
        i = data.draw(st.integers(0, len(proof.siblings) - 1))
        siblings = list(proof.siblings)
        siblings[i] = keccak256(siblings[i])
        with pytest.raises(ProofError):
            verify_key(m.root(), key, MapProof(tuple(siblings), proof.leaf))
        with pytest.raises(ProofError):  # a level dropped
            verify_key(m.root(), key, MapProof(proof.siblings[1:], proof.leaf))
    if proof.leaf is not None:
        with pytest.raises(ProofError):  # another value
            verify_key(
                m.root(), key, MapProof(proof.siblings, (proof.leaf[0], keccak256(proof.leaf[1])))
            )
        if proof.leaf[0] == key:
            with pytest.raises(ProofError):  # a present key said absent
                verify_key(m.root(), key, MapProof(proof.siblings, None))


def test_empty_map_proves_absence() -> None:
    m = SparseMap()
    assert m.root() == EMPTY
    assert verify_key(EMPTY, topic_key(b"t"), m.prove(topic_key(b"t"))) is None


def test_paths_go_below_the_bucket_depth() -> None:
    a, b = bytes(31) + b"\x01", bytes(31) + b"\x02"
    m = built({a: bytes(32), b: bytes(32)})
    assert len(m.prove(a).siblings) == 255 > BUCKET_DEPTH
    assert verify_key(m.root(), b, m.prove(b)) == bytes(32)


# Topic logs ---------------------------------------------------------------------------

TOPIC = b"\x01group"


def entries(ids: list[int]) -> list[TopicEntry]:
    return [TopicEntry(i, 1000 + i, keccak256(i.to_bytes(8, "big"))) for i in ids]


def committed(log: list[TopicEntry], others: int = 5) -> SparseMap:
    m = SparseMap()
    values = {topic_key(b"other%d" % i): keccak256(b"%d" % i) for i in range(others)}
    if log:
        from xnode.core import merkle

        values[topic_key(TOPIC)] = head_value(len(log), merkle.root_of([e.hash for e in log]))
    m.set(values)
    return m


sequence_ids = st.lists(st.integers(1, 500), unique=True, max_size=40).map(sorted)


@given(sequence_ids, st.integers(0, 520), st.integers(1, 50))
def test_honest_topic_proofs_verify(ids: list[int], after: int, limit: int) -> None:
    log = entries(ids)
    m = committed(log)
    proof = prove_topic(TOPIC, after, m.prove(topic_key(TOPIC)), log, limit)
    complete = verify_topic(m.root(), 520, after, proof)
    newer = [e for e in log if e.sequence_id > after]
    assert list(complete.entries) == newer[:limit]
    if len(newer) <= limit:
        assert complete.through == 520
    else:
        assert complete.through == newer[limit - 1].sequence_id


@given(sequence_ids.filter(bool), st.integers(0, 520), st.data())
def test_tampered_topic_proofs_fail(ids: list[int], after: int, data: st.DataObject) -> None:
    log = entries(ids)
    m = committed(log)
    proof = prove_topic(TOPIC, after, m.prove(topic_key(TOPIC)), log, 1000)
    run = list(proof.entries)
    i = data.draw(st.integers(0, len(run) - 1))
    tampered: list[list[TopicEntry]] = [
        run[:i] + run[i + 1 :],  # dropped
        [
            *run[:i],
            TopicEntry(run[i].sequence_id, run[i].expiry + 1, run[i].content_hash),
            *run[i + 1 :],
        ],  # altered expiry
        [*run[:i], dataclasses.replace(run[i], content_hash=bytes(32)), *run[i + 1 :]],
        [*run, TopicEntry(run[-1].sequence_id + 1, 0, bytes(32))],  # added
    ]
    if len(run) > 1:
        tampered.append(run[::-1])  # reordered
    for bad in tampered:
        if not bad:
            continue
        with pytest.raises(ProofError):
            verify_topic(m.root(), 600, after, dataclasses.replace(proof, entries=tuple(bad)))
    later = dataclasses.replace(proof, start=proof.start + 1)  # hides the entry at the cursor
    with pytest.raises(ProofError):
        verify_topic(m.root(), 600, after, later)


@given(sequence_ids.filter(bool), st.integers(0, 520))
def test_a_topic_proof_for_another_map_or_topic_fails(ids: list[int], after: int) -> None:
    log = entries(ids)
    m = committed(log)
    proof = prove_topic(TOPIC, after, m.prove(topic_key(TOPIC)), log, 1000)
    with pytest.raises(ProofError):
        verify_topic(committed(log, others=6).root(), 600, after, proof)
    with pytest.raises(ProofError):
        verify_topic(m.root(), 600, after, dataclasses.replace(proof, topic=b"\x01other"))
    with pytest.raises(ProofError):  # the topic said absent
        verify_topic(
            m.root(),
            600,
            after,
            TopicProof(TOPIC, MapProof(proof.map_proof.siblings, None), 0, EMPTY, 0, (), (), ()),
        )


def test_absent_topic_is_proven_absent() -> None:
    m = committed([])
    proof = prove_topic(TOPIC, 0, m.prove(topic_key(TOPIC)), [], 10)
    complete = verify_topic(m.root(), 50, 0, proof)
    assert complete.entries == () and complete.through == 50


def test_compare_tells_omitted_from_expired() -> None:
    log = entries([3, 5, 9])
    m = committed(log)
    complete = verify_topic(
        m.root(), 10, 2, prove_topic(TOPIC, 2, m.prove(topic_key(TOPIC)), log, 9)
    )
    served = [Served(3, log[0].expiry, log[0].content_hash)]
    # at 1006 entry 5 (expiry 1005) is expired, entry 9 (expiry 1009) is not
    found = compare(complete, served, now_unix=1006)
    assert [e.sequence_id for e in found.omitted] == [9]
    assert [e.sequence_id for e in found.expired] == [5]
    wrong = compare(complete, [*served, Served(5, 1, bytes(32)), Served(7, 1, bytes(32))], 1000)
    assert [e.sequence_id for e in wrong.omitted] == [5, 9]
    assert wrong.uncommitted == (7,)


@given(maps, maps)
def test_an_update_reads_only_siblings_off_the_changed_paths(
    before: dict[bytes, bytes], added: dict[bytes, bytes]
) -> None:
    """The store reads the siblings' nodes as they are after the new heads went in: a
    sibling that is itself on a changed path would read new leaves under an old node."""
    m = built(before)
    buckets = {bucket_of(k) for k in added}
    m.buckets.update(
        {
            b: {**m.buckets.get(b, {}), **{k: v for k, v in added.items() if bucket_of(k) == b}}
            for b in buckets
        }
    )
    changed = {b: subtree(m.bucket_leaves(b), BUCKET_DEPTH) for b in buckets}
    wanted = siblings_for_update(buckets)
    siblings = {n: m.node(*n) for n in wanted}
    made = updated_top(changed, lambda depth, index: siblings[(depth, index)])
    if added:
        everything = sorted({**before, **added}.items())
        assert made[(0, 0)].hash == subtree(everything, 0).hash
