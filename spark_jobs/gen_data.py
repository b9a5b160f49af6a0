"""Synthetic `xnode export` directories in the exact layout of docs/export-format.md.

Small hand-made fixtures (tests) and large vectorized ones (bench) share the writers below.
Misbehavior reports carry real host signatures (or deliberately wrong ones), and safety proofs
carry real originator-signed envelopes built with xnode.core.envelopes.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from xmtp.identity.associations.signature_pb2 import RecoverableEcdsaSignature
from xmtp.mls.api.v1 import mls_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.constants import (
    CHAIN_ORIGINATORS,
    IDENTITY_UPDATES_ORIGINATOR,
    NS_PER_SECOND,
    SECONDS_PER_DAY,
)
from xnode.core.crypto import SigningKey, keccak256, misbehavior_digest
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.fees import NO_FEES, Fees
from xnode.core.mls import mls_group_message
from xnode.core.registry_history import NodeHistory, RegistryHistory
from xnode.core.topics import Topic, TopicKind
from xnode.export.manifest import MANIFEST_FILE, sign_manifest
from xnode.export.schema import (
    CHECKPOINT_SCHEMA,
    CHECKPOINTS_DIR,
    FORK_SCHEMA,
    FORKS_DIR,
    LEAF_SCHEMA,
    LEAVES_DIR,
    LOGS_DIR,
    REPORT_SCHEMA,
)

ENVELOPE_FILE_SCHEMA = pa.schema(
    [
        ("originator_sequence_id", pa.int64()),
        ("originator_ns", pa.int64()),
        ("topic", pa.binary()),
        ("topic_kind", pa.int8()),
        ("expiry_unixtime", pa.int64()),
        ("payer_address", pa.binary()),
        ("size_bytes", pa.int32()),
        ("base_fee_picodollars", pa.int64()),
        ("congestion_fee_picodollars", pa.int64()),
        ("originator_envelope", pa.binary()),
    ]
)
REPORT_FILE_SCHEMA = REPORT_SCHEMA


def node_dir(root: Path, node_id: int) -> Path:
    return root / f"node-{node_id}"


def node_key(node_id: int, seed: int = 0) -> SigningKey:
    """Deterministic per node and seed, so exports generated apart agree on the registry."""
    return SigningKey(keccak256(b"xnode-gen-data|", f"{seed}|{node_id}".encode()))


def write_nodes(directory: Path, keys: Mapping[int, SigningKey]) -> None:
    """`node-<id>/nodes.parquet`: the registry snapshot the export carries."""
    directory.mkdir(parents=True, exist_ok=True)
    ids = sorted(keys)
    table = pa.table(
        {
            "node_id": pa.array(ids, pa.int32()),
            "public_key": pa.array([keys[i].public_key for i in ids], pa.binary()),
            "enabled": pa.array([True] * len(ids), pa.bool_()),
        }
    )
    pq.write_table(table, directory / "nodes.parquet")


def write_registry(
    path: Path,
    keys: Mapping[int, SigningKey],
    added_s: int = 0,
    status_changes: Mapping[int, Sequence[tuple[int, bool]]] | None = None,
) -> Path:
    """A registry snapshot as `xnode chain registry-snapshot` writes it: every node added at
    `added_s`, then the given (time, enabled) changes."""
    changes = status_changes or {}
    history = RegistryHistory(
        {
            n: NodeHistory(n, k.public_key, added_s, tuple(changes.get(n, ())))
            for n, k in keys.items()
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(history.to_json())
    return path


def sign_export(directory: Path, node_id: int, key: SigningKey, signed_at_ns: int = 0) -> None:
    """`node-<id>/manifest.json`, as `xnode export` signs it with the node's key."""
    (directory / MANIFEST_FILE).write_text(sign_manifest(directory, node_id, key, signed_at_ns))


def _day(ns: pa.Array | pa.ChunkedArray) -> Any:
    return pc.strftime(pc.cast(ns, pa.timestamp("ns")), format="%Y-%m-%d")


def _write_partitioned(table: pa.Table, base: Path, partitions: pa.Schema) -> None:
    ds.write_dataset(
        table,
        base,
        format="parquet",
        partitioning=ds.partitioning(partitions, flavor="hive"),
        basename_template="batch-{i}.parquet",
        existing_data_behavior="overwrite_or_ignore",
        max_rows_per_group=1 << 20,
    )


def write_envelopes(directory: Path, table: pa.Table) -> None:
    """`table` has the file columns plus `originator_node_id` (int32); `day` is derived."""
    table = table.append_column("day", _day(table.column("originator_ns")))
    partitions = pa.schema([("originator_node_id", pa.int32()), ("day", pa.string())])
    _write_partitioned(table, directory / "envelopes", partitions)


def write_reports(directory: Path, table: pa.Table) -> None:
    table = table.append_column("day", _day(table.column("server_time_ns")))
    _write_partitioned(table, directory / "misbehavior_reports", pa.schema([("day", pa.string())]))


# --- small, explicit envelope rows (tests) ------------------------------------------------


@dataclass(frozen=True)
class Envelope:
    originator: int
    sequence_id: int
    originator_ns: int
    kind: int = int(TopicKind.GROUP_MESSAGES)
    expiry: int = 0
    payload: bytes | None = None


def envelope_table(envelopes: Iterable[Envelope]) -> pa.Table:
    rows = list(envelopes)
    chain = [e.originator in CHAIN_ORIGINATORS for e in rows]
    return pa.table(
        {
            "originator_sequence_id": pa.array([e.sequence_id for e in rows], pa.int64()),
            "originator_ns": pa.array([e.originator_ns for e in rows], pa.int64()),
            "topic": pa.array([bytes([e.kind]) + bytes(32) for e in rows], pa.binary()),
            "topic_kind": pa.array([e.kind for e in rows], pa.int8()),
            "expiry_unixtime": pa.array([e.expiry for e in rows], pa.int64()),
            "payer_address": pa.array([None if c else b"\x11" * 20 for c in chain], pa.binary()),
            "size_bytes": pa.array([200] * len(rows), pa.int32()),
            "base_fee_picodollars": pa.array([0] * len(rows), pa.int64()),
            "congestion_fee_picodollars": pa.array([0] * len(rows), pa.int64()),
            "originator_envelope": pa.array([e.payload for e in rows], pa.binary()),
            "originator_node_id": pa.array([e.originator for e in rows], pa.int32()),
        }
    )


# --- large synthetic envelope tables (bench) ------------------------------------------------


def _pick(values: Sequence[Any], draws: pa.Array, dtype: pa.DataType) -> pa.Array:
    """values[floor(draw * len)] for uniform draws in [0, 1), without numpy."""
    index = pc.cast(pc.floor(pc.multiply(draws, float(len(values)))), pa.int64())
    return pc.take(pa.array(list(values), dtype), index)


_KINDS = [0] * 14 + [1, 1, 3, 3, 3, 2]  # mostly group messages; 5% identity updates
# Retention days a payer asked for; 0 stands for exports whose expiry column is 0, which the
# job must resolve with the XIP default itself.
_RETENTION_DAYS = [0, 30, 90, 183, 183, 183, 365]
_TOPICS_PER_KIND = 8


def _expiry(ns: pa.Array, kind: pa.Array, days: pa.Array) -> pa.Array:
    # Integer division, as the job's `div`: a float would be off by one at the boundary.
    expiry = pc.add(pc.divide(ns, NS_PER_SECOND), pc.multiply(days, SECONDS_PER_DAY))
    never = pc.or_(pc.equal(kind, int(TopicKind.IDENTITY_UPDATES)), pc.equal(days, 0))
    return pc.if_else(never, pa.scalar(0, pa.int64()), expiry)


def _topics(kind: pa.Array, draws: pa.Array) -> pa.Array:
    topics = [bytes([k]) + keccak256(bytes([k, i])) for k in range(4) for i in range(8)]
    index = pc.add(
        pc.multiply(pc.cast(kind, pa.int64()), _TOPICS_PER_KIND),
        _pick(range(_TOPICS_PER_KIND), draws, pa.int64()),
    )
    return pc.take(pa.array(topics, pa.binary()), index)


def synthetic_envelopes(
    originator: int, first_seq: int, count: int, start_ns: int, step_ns: int, seed: int
) -> pa.Table:
    """`count` consecutive sequence ids of one originator, vectorized with pyarrow.compute.
    Originator 0 carries group messages and 1 identity updates, never expiring and unpaid."""
    chain = originator in CHAIN_ORIGINATORS

    def draws(offset: int) -> pa.Array:
        return pc.random(count, initializer=seed + offset)

    seq = pa.array(range(first_seq, first_seq + count), pa.int64())
    ns = pc.add(pc.multiply(pc.subtract(seq, first_seq), step_ns), start_ns)
    if originator == IDENTITY_UPDATES_ORIGINATOR:
        kinds = [int(TopicKind.IDENTITY_UPDATES)]
    elif chain:
        kinds = [int(TopicKind.GROUP_MESSAGES)]
    else:
        kinds = _KINDS
    kind = _pick(kinds, draws(0), pa.int8())
    zero = pa.repeat(pa.scalar(0, pa.int64()), count)
    if chain:
        expiry = zero
        payer = pa.nulls(count, pa.binary())
        base_fee, congestion_fee = zero, zero
    else:
        expiry = _expiry(ns, kind, _pick(_RETENTION_DAYS, draws(1), pa.int64()))
        payer = _pick([keccak256(bytes([i]))[-20:] for i in range(16)], draws(3), pa.binary())
        base_fee = _pick([10_000, 25_000, 180_000, 1_500_000], draws(5), pa.int64())
        congestion_fee = _pick([0, 0, 0, 500, 5_000], draws(6), pa.int64())
    return pa.table(
        {
            "originator_sequence_id": seq,
            "originator_ns": ns,
            "topic": _topics(kind, draws(2)),
            "topic_kind": kind,
            "expiry_unixtime": expiry,
            "payer_address": payer,
            "size_bytes": _pick([180, 420, 1500, 9000], draws(4), pa.int32()),
            "base_fee_picodollars": base_fee,
            "congestion_fee_picodollars": congestion_fee,
            "originator_envelope": pa.nulls(count, pa.binary()),
            "originator_node_id": pa.repeat(pa.scalar(originator, pa.int32()), count),
        }
    )


def drop_fraction(table: pa.Table, fraction: float, seed: int) -> pa.Table:
    """Random gaps, as a node that missed some envelopes would export."""
    return table.filter(pc.greater_equal(pc.random(table.num_rows, initializer=seed), fraction))


# --- envelopes and misbehavior reports with real signatures ---------------------------------

_PAYER = SigningKey(keccak256(b"xnode-gen-data|payer"))


def signed_envelope(
    node_id: int,
    key: SigningKey,
    sequence_id: int,
    originator_ns: int,
    data: bytes,
    payer_key: SigningKey = _PAYER,
    fees: Fees = NO_FEES,
    depends_on: Mapping[int, int] | None = None,
) -> bytes:
    """A real OriginatorEnvelope for a group message, signed by `key` as originator `node_id`
    with `fees`, for a payer envelope signed by `payer_key`, depending on `depends_on`."""
    topic = Topic(TopicKind.GROUP_MESSAGES, keccak256(b"group", data[:8]))
    aad = envelopes_pb2.AuthenticatedData(
        target_originator=node_id,
        target_topic=topic.raw,
        depends_on=envelopes_pb2.Cursor(node_id_to_sequence_id=depends_on or {}),
    )
    client = envelopes_pb2.ClientEnvelope(
        aad=aad,
        group_message=mls_pb2.GroupMessageInput(
            v1=mls_pb2.GroupMessageInput.V1(data=mls_group_message(topic.identifier, data))
        ),
    )
    payer = validate_payer_envelope(build_payer_envelope(client, payer_key, node_id), node_id)
    return originate(payer, node_id, sequence_id, originator_ns, key, fees).raw


def liveness_report(
    misbehaving: int,
    kind: int,
    reporter_time_ns: int,
    submitted_by_node: bool = True,
    response_time_ns: int = 5_000_000_000,
) -> mb.UnsignedMisbehaviorReport:
    return mb.UnsignedMisbehaviorReport(
        reporter_time_ns=reporter_time_ns,
        misbehaving_node_id=misbehaving,
        type=mb.Misbehavior.ValueType(kind),
        liveness=mb.LivenessFailure(response_time_ns=response_time_ns % (1 << 32)),
        submitted_by_node=submitted_by_node,
    )


def safety_report(
    misbehaving: int,
    kind: int,
    envelopes: Sequence[bytes],
    reporter_time_ns: int,
    submitted_by_node: bool = False,
) -> mb.UnsignedMisbehaviorReport:
    parsed = [envelopes_pb2.OriginatorEnvelope.FromString(raw) for raw in envelopes]
    return mb.UnsignedMisbehaviorReport(
        reporter_time_ns=reporter_time_ns,
        misbehaving_node_id=misbehaving,
        type=mb.Misbehavior.ValueType(kind),
        safety=mb.SafetyFailure(envelopes=parsed),
        submitted_by_node=submitted_by_node,
    )


def report_row(
    report_id: int,
    host_id: int,
    host_key: SigningKey,
    unsigned: mb.UnsignedMisbehaviorReport,
    server_time_ns: int,
    forged_by: SigningKey | None = None,
) -> dict[str, Any]:
    """One exported row; `forged_by` signs instead of the host (a forgery the job must catch)."""
    raw = unsigned.SerializeToString()
    signer = forged_by or host_key
    report = mb.MisbehaviorReport(
        server_time_ns=server_time_ns,
        unsigned_misbehavior_report=raw,
        signature=RecoverableEcdsaSignature(bytes=signer.sign(misbehavior_digest(raw))),
    )
    return {
        "report_id": report_id,
        "server_time_ns": server_time_ns,
        "host_node_id": host_id,
        "misbehaving_node_id": unsigned.misbehaving_node_id,
        "type": int(unsigned.type),
        "submitted_by_node": unsigned.submitted_by_node,
        "report": report.SerializeToString(),
    }


def report_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist([dict(r) for r in rows], schema=REPORT_FILE_SCHEMA)


# --- the benchmark's report set ---------------------------------------------------------------


@dataclass(frozen=True)
class ReportMix:
    hosts: Sequence[int]
    count: int
    start_ns: int
    span_ns: int
    forged_fraction: float = 0.02
    duplicate_fraction: float = 0.01
    duplicate_sequence_proofs: int = 20
    seed: int = 7


def synthetic_reports(mix: ReportMix, keys: Mapping[int, SigningKey]) -> dict[int, pa.Table]:
    """host id -> its exported report rows: liveness mostly, some forged, some exact
    duplicates, and a few duplicate-sequence proofs with real originator signatures."""
    rng = random.Random(mix.seed)
    impostor = SigningKey(keccak256(b"xnode-gen-data|impostor"))
    rows: dict[int, list[dict[str, Any]]] = {h: [] for h in mix.hosts}
    for i in range(mix.count):
        host = mix.hosts[i % len(mix.hosts)]
        target = rng.choice([h for h in mix.hosts if h != host])
        t = mix.start_ns + rng.randrange(mix.span_ns)
        unsigned = liveness_report(target, rng.choice((1, 2, 3)), t, rng.random() < 0.8)
        forged = impostor if rng.random() < mix.forged_fraction else None
        row = report_row(len(rows[host]) + 1, host, keys[host], unsigned, t + 1000, forged)
        rows[host].append(row)
        if rng.random() < mix.duplicate_fraction:  # the same report exported twice
            rows[host].append(dict(row, report_id=len(rows[host]) + 1))
    for i in range(mix.duplicate_sequence_proofs):
        host, culprit = mix.hosts[i % len(mix.hosts)], mix.hosts[(i + 1) % len(mix.hosts)]
        t = mix.start_ns + rng.randrange(mix.span_ns)
        pair = [signed_envelope(culprit, keys[culprit], 1000 + i, t, bytes([v, i])) for v in (1, 2)]
        unsigned = safety_report(culprit, 5, pair, t)
        rows[host].append(report_row(len(rows[host]) + 1, host, keys[host], unsigned, t + 1000))
    return {host: report_table(r) for host, r in rows.items()}


# --- committed logs (the audit job) ---------------------------------------------------------


def write_logs(
    directory: Path,
    leaves: Mapping[int, Sequence[tuple[int, bytes] | tuple[int, bytes, int | None]]],
    checkpoints: Sequence[tuple[int, int, bytes, str | None]],
    forks: Sequence[tuple[int, int, bytes, bytes]] = (),
) -> None:
    """`node-<id>/logs/` as `xnode export --with-logs` writes it (docs/export-format.md):
    leaves per originator as (sequence id, leaf hash[, committed expiry]), checkpoints as
    (originator, tree size, signed, conflict), forks as (originator, sequence id, envelope
    hash, envelope)."""
    logs = directory / LOGS_DIR
    for originator, leaf_rows in leaves.items():
        table = pa.Table.from_arrays(
            [
                pa.array([r[0] for r in leaf_rows], pa.int64()),
                pa.array([r[1] for r in leaf_rows]),
                pa.array([r[2] if len(r) > 2 else None for r in leaf_rows], pa.int64()),
            ],
            schema=LEAF_SCHEMA,
        )
        part = logs / LEAVES_DIR / f"originator_node_id={originator}" / "part-0.parquet"
        part.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, part)
    tables: list[tuple[Sequence[tuple[Any, ...]], pa.Schema, str]] = [
        (checkpoints, CHECKPOINT_SCHEMA, CHECKPOINTS_DIR),
        (forks, FORK_SCHEMA, FORKS_DIR),
    ]
    for rows, schema, name in tables:
        columns = [[r[i] for r in rows] for i in range(len(schema))]
        table = pa.Table.from_arrays(
            [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
        )
        (logs / name).mkdir(parents=True, exist_ok=True)
        pq.write_table(table, logs / name / "part-0.parquet")
