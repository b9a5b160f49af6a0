"""Audit replay over exports: `xnode audit`'s checks (xnode.core.audit) for
histories too large for one machine.

Input: `xnode export --with-payloads --with-logs` directories (docs/export-format.md). Each
node's export is audited on its own: its envelopes and leaf hashes are joined per
(originator, sequence id), partitioned by originator and replayed in sequence order on the
executors (`OriginatorAudit`, the same code the daemon's command runs); each partition
returns its `Verdict` and the driver adds them up. Checkpoints and conflicts are read on the
driver (a few per thousand envelopes) and shipped with the job.

One difference from `xnode audit`: envelopes are exported incrementally, so a fork resolved
after its envelope was exported leaves the older version in the export. Conflicts are
therefore checked as evidence (every version signed by the originator, two different
contents); which version the log keeps is `xnode audit`'s check. Chain payloads are checked
for their proofs, not against the chain (the job has no RPC). A leaf exported without its
envelope is expired when the expiry it commits to (the leaves' `expiry` column) has passed at
`--at` (unix seconds, default: when the job runs), a loss otherwise; without that column (older
exports, format 1 leaves) nothing is provable either way.

Exit codes: 0 clean, 1 faults found, 2 could not run."""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_jobs.inputs import (
    InputError,
    find_envelope_files,
    find_node_dirs,
    load_envelopes,
    one_line,
    read_registry_history,
    spark_read_errors,
)
from spark_jobs.output import write_json_atomic
from spark_jobs.session import build_session
from xnode.core.audit import ConflictVersion, OriginatorAudit, Verdict, audit_conflict
from xnode.core.registry import RegistryKeys
from xnode.export.schema import CHECKPOINTS_DIR, FORKS_DIR, LEAVES_DIR, LOGS_DIR

PAYLOAD = "originator_envelope"
LEAF_SCHEMA = T.StructType(
    [
        T.StructField("sequence_id", T.LongType()),
        T.StructField("leaf_hash", T.BinaryType()),
        T.StructField("expiry", T.LongType()),
        T.StructField("originator_node_id", T.IntegerType()),
    ]
)


def _logs_dir(node: Path) -> Path:
    logs = node / LOGS_DIR
    if not (logs / LEAVES_DIR).is_dir() and not (logs / CHECKPOINTS_DIR).is_dir():
        raise InputError(f"{node}: no {LOGS_DIR}/ (export with `xnode export --with-logs`)")
    return logs


def _rows(directory: Path, columns: Sequence[str]) -> list[dict[str, Any]]:
    if not directory.is_dir():
        return []
    try:
        rows: list[dict[str, Any]] = pq.read_table(directory, columns=list(columns)).to_pylist()
    except OSError as exc:
        raise InputError(f"{directory}: not readable ({exc})") from None
    return rows


def _checkpoints(logs: Path) -> dict[int, list[bytes]]:
    """originator -> its accepted checkpoints, smallest tree first."""
    rows = _rows(logs / CHECKPOINTS_DIR, ["originator_node_id", "tree_size", "signed", "conflict"])
    by_originator: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for r in rows:
        if r["conflict"] is None:
            by_originator[r["originator_node_id"]].append((r["tree_size"], r["signed"]))
    return {o: [s for _, s in sorted(cs)] for o, cs in by_originator.items()}


def _forks(logs: Path) -> dict[tuple[int, int], list[ConflictVersion]]:
    columns = ["originator_node_id", "originator_sequence_id", "envelope_hash", "envelope"]
    forks: dict[tuple[int, int], list[ConflictVersion]] = defaultdict(list)
    for r in _rows(logs / FORKS_DIR, columns):
        key = (r["originator_node_id"], r["originator_sequence_id"])
        forks[key].append(ConflictVersion(r["envelope_hash"], r["envelope"]))
    return dict(forks)


def history(spark: SparkSession, node: Path) -> DataFrame:
    """(originator_node_id, sequence_id, leaf_hash, originator_envelope) of one node's export,
    one row per sequence id held as an envelope and / or a leaf, partitioned by originator and
    sorted by sequence id within each partition."""
    envelopes = load_envelopes(spark, find_envelope_files([node])).select(
        "originator_node_id",
        F.col("originator_sequence_id").alias("sequence_id"),
        "originator_envelope",
    )
    leaves_dir = node / LOGS_DIR / LEAVES_DIR
    if leaves_dir.is_dir():
        leaves = spark.read.schema(LEAF_SCHEMA).parquet(str(leaves_dir))
    else:
        leaves = spark.createDataFrame([], LEAF_SCHEMA)
    joined = leaves.join(envelopes, ["originator_node_id", "sequence_id"], "full_outer")
    return joined.repartition("originator_node_id").sortWithinPartitions(
        "originator_node_id", "sequence_id"
    )


def _audit_partition(
    rows: Iterable[Any],
    keys: RegistryKeys,
    checkpoints: Mapping[int, list[bytes]],
    forked: Mapping[int, set[int]],
    now_unix: int,
) -> Iterator[Verdict]:
    verdict = Verdict()
    audit: OriginatorAudit | None = None
    for row in rows:
        originator = int(row["originator_node_id"])
        if audit is None or audit.originator != originator:
            if audit is not None:
                audit.finish()
            audit = OriginatorAudit(
                originator,
                keys,
                checkpoints.get(originator, []),
                forked.get(originator, set()),
                verdict,
                now_unix,
            )
        leaf, raw, expiry = row["leaf_hash"], row["originator_envelope"], row["expiry"]
        # A leaf's committed expiry is null for format 1 leaves and in exports made before
        # it was exported: such a leaf without its envelope proves nothing either way.
        audit.row(
            int(row["sequence_id"]),
            None if leaf is None else bytes(leaf),
            None if raw is None else bytes(raw),
            None if expiry is None else int(expiry),
        )
    if audit is not None:
        audit.finish()
    yield verdict


def audit_node_export(
    spark: SparkSession, node: Path, keys: RegistryKeys, now_unix: int
) -> Verdict:
    logs = _logs_dir(node)
    checkpoints = _checkpoints(logs)
    forks = _forks(logs)
    forked: dict[int, set[int]] = defaultdict(set)
    for originator, sequence_id in forks:
        forked[originator].add(sequence_id)
    shipped = spark.sparkContext.broadcast((dict(keys), checkpoints, dict(forked)))

    def run(rows: Iterable[Any]) -> Iterator[Verdict]:
        k, c, f = shipped.value
        return _audit_partition(rows, k, c, f, now_unix)

    files = [f for fs in find_envelope_files([node]).values() for f in fs]
    if any(pq.read_schema(f).get_field_index(PAYLOAD) < 0 for f in files):
        raise InputError(f"{node}: no payloads (export with `xnode export --with-payloads`)")
    with spark_read_errors(f"the export under {node}"):
        frame = history(spark, node)
        verdicts = frame.rdd.mapPartitions(run).collect()
    total = Verdict()
    for verdict in verdicts:
        total.merge(verdict)
    for (originator, sequence_id), versions in sorted(forks.items()):
        audit_conflict(originator, sequence_id, versions, None, keys, total, check_pick=False)
    return total


def audit_exports(
    spark: SparkSession,
    inputs: Sequence[str | Path],
    registry: str | Path,
    now_unix: int | None = None,
) -> dict[int, Verdict]:
    """node id -> the verdict on its export; expiry judged at `now_unix` (None: now).
    Signatures are checked against `registry`, the NodeRegistry's history (`xnode chain
    registry-snapshot`), never against the keys an export's own `nodes.parquet` lists: that
    is its operator's word, and a key it added there would pass."""
    keys = read_registry_history(registry).keys()
    at = int(time.time()) if now_unix is None else now_unix
    return {
        int(node.name.removeprefix("node-")): audit_node_export(spark, node, keys, at)
        for node in find_node_dirs(inputs)
    }


def _document(verdicts: Mapping[int, Verdict]) -> dict[str, Any]:
    return {
        "clean": all(v.clean for v in verdicts.values()),
        "nodes": [
            {
                "node_id": node,
                "envelopes": v.envelopes,
                "expired": v.expired,
                "format1_without_envelope": v.format1_without_envelope,
                "checkpoints": v.checkpoints,
                "checkpoints_unchecked": v.checkpoints_unchecked,
                "conflicts": v.conflicts,
                "faults": {str(k): n for k, n in sorted(v.faults.items())},
                "details": [f.describe() for f in v.details],
            }
            for node, v in sorted(verdicts.items())
        ],
    }


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", action="append", required=True, help="export directory")
    parser.add_argument("--out", default=None, help="also write the verdicts as JSON here")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument(
        "--at", type=int, default=None, help="unix seconds expiry is judged at (default: now)"
    )
    parser.add_argument(
        "--registry",
        required=True,
        help="the NodeRegistry's history (`xnode chain registry-snapshot`) to check signatures "
        "against (never the keys the exports list: an operator's word)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        find_envelope_files(args.input)  # before the JVM starts: bad input fails fast
        spark = build_session(args.master, app_name="xnode-audit")
        try:
            verdicts = audit_exports(spark, args.input, args.registry, args.at)
        finally:
            spark.stop()
        if args.out:
            write_json_atomic(args.out, _document(verdicts))
    except InputError as exc:
        print(f"audit: could not run: {one_line(exc)}", file=sys.stderr)
        return 2
    for node, verdict in sorted(verdicts.items()):
        print(f"node {node}: {verdict.describe()}")
    return 0 if all(v.clean for v in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
