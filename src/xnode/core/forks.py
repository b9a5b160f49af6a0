"""Forks: two different envelopes an originator signed for one sequence id.

A fork proves itself (both signatures recover to the originator's registry key,
xnode.core.evidence), so every node keeps both as evidence. Only one can sit in the log, and
every node must keep the same one whatever order it saw them in, or the network never
converges after an equivocation. The rule is the jami-swarm idea of a deterministic conflict
rule: the signed OriginatorEnvelope bytes with the lower keccak256 stay in the log."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from xnode.core.crypto import keccak256


def envelope_hash(raw: bytes) -> bytes:
    """keccak256 of the signed OriginatorEnvelope bytes, exactly as stored and served."""
    return keccak256(raw)


def log_keeps(stored: bytes, newcomer: bytes) -> bytes:
    """Which of two envelopes for one (originator, sequence id) stays in the log: the lower
    `envelope_hash`. Symmetric, so the order they arrive in does not matter."""
    return newcomer if envelope_hash(newcomer) < envelope_hash(stored) else stored


def newcomer_wins(stored: bytes, newcomer: bytes) -> bool:
    """True when `newcomer` must replace the stored envelope in the log."""
    return stored != newcomer and log_keeps(stored, newcomer) == newcomer


@dataclass(frozen=True, slots=True)
class ForkResolution:
    """What storing one version of a forked sequence id did."""

    previous: bytes  # the version the log held before
    replaced: bool  # the newcomer took its place in the log
    new_evidence: bool  # a version not kept as fork evidence before


@dataclass(frozen=True, slots=True)
class Fork:
    """Every known signed version of one (originator, sequence id); `versions[0]` is the one
    the log keeps."""

    originator_node_id: int
    sequence_id: int
    versions: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class ForkDigest:
    """A short summary of every version of an originator's forks a node keeps: two nodes
    with equal digests keep the same versions (anti-entropy compares them before paging)."""

    versions: int
    digest: bytes  # empty when no version is kept


def fork_digest(kept: Iterable[tuple[int, bytes]]) -> ForkDigest:
    """The digest of kept versions given as (sequence id, `envelope_hash`) pairs, in any
    order: keccak256 over the pairs sorted, each as 8 big-endian bytes and the hash."""
    ordered = sorted(kept)
    if not ordered:
        return ForkDigest(0, b"")
    joined = b"".join(seq.to_bytes(8, "big") + digest for seq, digest in ordered)
    return ForkDigest(len(ordered), keccak256(joined))
