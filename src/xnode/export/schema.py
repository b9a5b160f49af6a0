"""The Parquet schemas of an export (docs/export-format.md); pyarrow only, so the Spark
jobs' data generator can share them without importing the daemon's store."""

from __future__ import annotations

import pyarrow as pa

PAYER_ADDRESS_LENGTH = 20

ENVELOPE_SCHEMA = pa.schema(
    [
        ("originator_sequence_id", pa.int64()),
        ("originator_ns", pa.int64()),
        ("topic", pa.binary()),
        ("topic_kind", pa.int8()),
        ("expiry_unixtime", pa.int64()),
        ("payer_address", pa.binary(PAYER_ADDRESS_LENGTH)),
        ("size_bytes", pa.int32()),
        # The fees the originator signed (UnsignedOriginatorEnvelope fields 5 and 6)
        ("base_fee_picodollars", pa.int64()),
        ("congestion_fee_picodollars", pa.int64()),
    ]
)
PAYLOAD_FIELD = pa.field("originator_envelope", pa.binary())
REPORT_SCHEMA = pa.schema(
    [
        ("report_id", pa.int64()),
        ("server_time_ns", pa.int64()),
        ("host_node_id", pa.int32()),
        ("misbehaving_node_id", pa.int32()),
        ("type", pa.int32()),
        ("submitted_by_node", pa.bool_()),
        ("report", pa.binary()),
    ]
)
NODES_SCHEMA = pa.schema(
    [("node_id", pa.int32()), ("public_key", pa.binary()), ("enabled", pa.bool_())]
)

# The committed logs, written whole at each `xnode export --with-logs` under
# node-<id>/logs/ (docs/export-format.md): what the audit job replays the roots from.
LEAF_SCHEMA = pa.schema(
    [
        ("sequence_id", pa.int64()),
        ("leaf_hash", pa.binary()),
        # The expiry a format 2 leaf commits to (0: never); null for a format 1 leaf. What
        # tells a leaf whose envelope is gone as expired or lost (xnode.core.leaves).
        ("expiry", pa.int64()),
    ]
)
CHECKPOINT_SCHEMA = pa.schema(
    [
        ("originator_node_id", pa.int32()),
        ("tree_size", pa.int64()),
        ("signed", pa.binary()),
        ("conflict", pa.string()),  # null for the accepted chain; why it was kept aside
    ]
)
FORK_SCHEMA = pa.schema(
    [
        ("originator_node_id", pa.int32()),
        ("originator_sequence_id", pa.int64()),
        ("envelope_hash", pa.binary()),
        ("envelope", pa.binary()),
    ]
)
LOGS_DIR = "logs"
LEAVES_DIR = "leaves"
CHECKPOINTS_DIR = "checkpoints"
FORKS_DIR = "forks"
