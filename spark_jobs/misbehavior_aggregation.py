"""Verifies and aggregates misbehavior reports from many nodes' exports (XIP-49 3.2.7, 3.2.8).

    python -m spark_jobs.misbehavior_aggregation --input DIR [--input DIR ...] --out OUTDIR
        --registry FILE [--judged-share F] [--window-minutes M] [--master URL]
        [--chain-rpc-url URL --contracts-file FILE]

Only what the signatures and the chain prove is trusted; the exported convenience columns are
ignored in favour of the signed report:
- the registry is the NodeRegistry contract's history (`--registry`, written by `xnode chain
  registry-snapshot` from the contract's events): each node's key, and when it was enabled.
  Nothing of it comes from an export;
- an export is read only when its node signed it (manifest.json: every file's hash, signed by
  the node's registry key) and its report files are the ones it signed; any other export is
  refused by path (`refused_exports` in the report) and left out;
- each report must be signed by its host, keccak256(b"misbehavior|" + unsigned), under the
  host's registry key; anything else is rejected (forged, ...);
- exact duplicates (same host, same unsigned bytes) count once;
- a safety report counts only if its own envelopes prove its claim, re-checked here against
  the registry keys by xnode.core.evidence (the node uses the same checker): a fork for
  DUPLICATE_SEQUENCE_ID, timestamps that go back for OUT_OF_ORDER, a broken payer-envelope
  rule for INVALID_PAYLOAD, a dependency on the originator's own later sequence id for
  CAUSAL_ORDERING, a chain payload its transaction did not carry for BLOCKCHAIN_INCONSISTENCY
  (checked against the chain given by --chain-rpc-url and --contracts-file: the transactions
  the reports name are read on the driver; without them these reports are unverified);
  claims it cannot check are rejected (unverified_proof). Two honest envelopes in one report
  flag nobody. One proof flags the node; so does one WITHHOLDING report (xnode's extension,
  xnode.core.withholding), proven by the accused's own checkpoint and signed holdings, and
  one SPLIT_VIEW report, two of its checkpoints committing to two leaves at one sequence id;
- liveness reports count only from registered nodes: a report the host filed itself
  (`submitted_by_node`, host signature recovering to the host's registry key), per
  misbehaving node, type and window of reporter_time_ns; a reporter counts only while
  enabled (throughout the window), and the node is flagged when the distinct reporters are
  more than `--judged-share` (default 1/3) of the nodes enabled in the window other than the
  accused, and at least two (xnode.core.registry_history.judge_window). A node's reports
  about itself never make it a reporter. WITHHOLDING_ACCUSATION reports (a committed
  sequence id the accused would not account for: no proof) are judged the same way, and
  only when their commitment verifies (the accused's signed checkpoint holds the leaf).
  Client-submitted liveness reports are kept apart (`client_liveness`, attributed to the host
  that accepted them: the protocol's report names no client or payer) and never count
  toward a threshold: one client writing to many hosts must not flag anyone.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (spark-submit): make `spark_jobs` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.parquet as pq
from google.protobuf.message import DecodeError
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.functions import arrow_udf
from pyspark.sql.pandas.types import from_arrow_type

from spark_jobs.chain_facts import fetch_chain_facts, named_transactions, payload_contracts
from spark_jobs.council_report import CouncilData, render_html, render_markdown
from spark_jobs.inputs import (
    REPORTS_DIR,
    ExportFiles,
    InputError,
    find_report_files,
    load_reports,
    one_line,
    read_registry_history,
    signed_exports,
    spark_read_errors,
)
from spark_jobs.output import atomic_directory
from spark_jobs.session import build_session
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.chain_evidence import ChainFacts
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import (
    SignatureError,
    keccak256,
    misbehavior_digest,
    recover_public_key,
)
from xnode.core.envelopes import envelope_signer
from xnode.core.evidence import why_unproven
from xnode.core.misbehavior import EXTENDED_PROOF_TYPES, JUDGED_TYPES, PROVEN_TYPES
from xnode.core.misbehavior import type_name as known_type_name
from xnode.core.registry import RegistryKeys
from xnode.core.registry_history import DEFAULT_JUDGED_SHARE, RegistryHistory, judge_window
from xnode.core.withholding import WITHHOLDING_ACCUSATION, why_not_committed

ChainLookup = Callable[[list[bytes]], ChainFacts]
DEFAULT_WINDOW_MINUTES = 60
# Unsigned protobuf fields wider than the columns they land in. A host signs whatever a client
# submitted, so out-of-range values must become a rejection, not an overflow that kills a batch.
_MAX_NODE_ID = 2**31 - 1  # node ids are int32 in exports and the registry
_MAX_INT64 = 2**63 - 1

ENVELOPE_FACTS = pa.struct(
    [
        ("originator_node_id", pa.int64()),
        ("sequence_id", pa.int64()),
        ("signer", pa.binary()),
        ("error", pa.string()),
    ]
)
VERIFIED = pa.struct(
    [
        ("report_hash", pa.binary()),
        ("error", pa.string()),
        ("reporter_time_ns", pa.int64()),
        ("misbehaving_node_id", pa.int64()),
        ("type", pa.int32()),
        ("submitted_by_node", pa.bool_()),
        ("response_time_ns", pa.int64()),
        ("host_signer", pa.binary()),
        ("host_signature_error", pa.string()),
        ("envelopes", pa.list_(ENVELOPE_FACTS)),
        ("duplicate_originator", pa.int64()),
        ("duplicate_sequence_id", pa.int64()),
        ("proof_error", pa.string()),
    ]
)
VERIFIED_SPARK: T.DataType = from_arrow_type(VERIFIED)


def type_name(kind: int) -> str:
    return known_type_name(kind)


# --- per-report verification (runs in Python workers) ----------------------------------------


def _envelope_facts(envelope: envelopes_pb2.OriginatorEnvelope) -> dict[str, Any]:
    facts: dict[str, Any] = {"originator_node_id": None, "sequence_id": None}
    try:
        unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
            envelope.unsigned_originator_envelope
        )
        if unsigned.originator_sequence_id > _MAX_INT64:
            raise ValueError(f"sequence id {unsigned.originator_sequence_id} is out of range")
        facts["originator_node_id"] = unsigned.originator_node_id
        facts["sequence_id"] = unsigned.originator_sequence_id
        facts["signer"] = envelope_signer(envelope)
    except (DecodeError, SignatureError, ValueError) as exc:
        facts["error"] = f"{type(exc).__name__}: {exc}"
    return facts


def _duplicate_pair(
    envelopes: Sequence[envelopes_pb2.OriginatorEnvelope],
) -> tuple[int, int] | None:
    """(originator, sequence id) shared by two envelopes whose signed content differs."""
    seen: dict[tuple[int, int], bytes] = {}
    for envelope in envelopes:
        try:
            unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
                envelope.unsigned_originator_envelope
            )
        except DecodeError:
            continue
        key = (unsigned.originator_node_id, unsigned.originator_sequence_id)
        if key[1] > _MAX_INT64:
            continue
        content = envelope.unsigned_originator_envelope
        if seen.setdefault(key, content) != content:
            return key
    return None


def verify_report(
    raw: bytes, registry: RegistryKeys | None = None, chain: ChainFacts | None = None
) -> dict[str, Any]:
    """Decodes one exported `report`, recovers every signer and, for a safety report, says
    why its envelopes do not prove its claim against `registry` and `chain`
    (xnode.core.evidence); policy is applied in Spark."""
    try:
        report = mb.MisbehaviorReport.FromString(raw)
        unsigned = mb.UnsignedMisbehaviorReport.FromString(report.unsigned_misbehavior_report)
    except DecodeError as exc:
        return {"report_hash": keccak256(raw), "error": f"report does not decode: {exc}"}
    if unsigned.misbehaving_node_id > _MAX_NODE_ID or unsigned.reporter_time_ns > _MAX_INT64:
        return {
            "report_hash": keccak256(report.unsigned_misbehavior_report),
            "error": f"misbehaving_node_id {unsigned.misbehaving_node_id} or reporter_time_ns "
            f"{unsigned.reporter_time_ns} is out of range",
        }
    out: dict[str, Any] = {
        "report_hash": keccak256(report.unsigned_misbehavior_report),
        "reporter_time_ns": unsigned.reporter_time_ns,
        "misbehaving_node_id": unsigned.misbehaving_node_id,
        "type": int(unsigned.type),
        "submitted_by_node": unsigned.submitted_by_node,
    }
    try:
        digest = misbehavior_digest(report.unsigned_misbehavior_report)
        out["host_signer"] = recover_public_key(report.signature.bytes, digest)
    except SignatureError as exc:
        out["host_signature_error"] = str(exc)
    failure = unsigned.WhichOneof("failure")
    if failure == "liveness":
        out["response_time_ns"] = unsigned.liveness.response_time_ns
    if int(unsigned.type) in EXTENDED_PROOF_TYPES:
        out["proof_error"] = why_unproven(unsigned, registry or {}, chain)
    elif int(unsigned.type) == WITHHOLDING_ACCUSATION:
        accused = unsigned.misbehaving_node_id
        out["proof_error"] = why_not_committed(unsigned, accused, (registry or {}).get(accused, ()))
    elif failure == "safety":
        envelopes = unsigned.safety.envelopes
        out["envelopes"] = [_envelope_facts(e) for e in envelopes]
        pair = _duplicate_pair(envelopes)
        if pair is not None:
            out["duplicate_originator"], out["duplicate_sequence_id"] = pair
        out["proof_error"] = why_unproven(unsigned, registry or {}, chain)
    return out


def verify_batch(
    reports: pa.Array, registry: RegistryKeys | None = None, chain: ChainFacts | None = None
) -> pa.Array:
    """Arrow in, Arrow out: no pandas needed on the driver or the workers. (mapInArrow would
    need pandas on the driver in pyspark 4.3; a scalar Arrow UDF does not.)"""
    verified = [verify_report(r, registry, chain) for r in reports.to_pylist()]
    return pa.array(verified, type=VERIFIED)


def verify_reports(registry: RegistryKeys, chain: ChainFacts | None) -> Callable[[str], Column]:
    """The verification UDF, with the registry keys and the named transactions' outcomes
    shipped to the workers in its closure (a few keys per node, a few transactions)."""

    def batch(reports: pa.Array) -> pa.Array:
        return verify_batch(reports, registry, chain)

    # The eval type (scalar Arrow UDF) is inferred from the hints; pyspark's stubs only
    # describe calls that pass it explicitly, which is deprecated at runtime.
    udf: Callable[[str], Column] = arrow_udf(batch, VERIFIED_SPARK)  # type: ignore[call-overload]
    return udf


# --- policy, in Spark SQL ---------------------------------------------------------------------


def registry_frame(spark: SparkSession, registry: RegistryKeys) -> DataFrame:
    schema = "node_id int, keys array<binary>"
    rows = [(node, sorted(keys)) for node, keys in sorted(registry.items())]
    return spark.createDataFrame(rows, schema)


def _first_match(rules: Sequence[tuple[Column, Column]]) -> Column:
    result = F.lit(None).cast("string")
    for condition, value in reversed(rules):
        result = F.when(condition, value).otherwise(result)
    return result


def _rejection_rules() -> list[tuple[Column, str, Column]]:
    """(condition, reason_code, reason), first match wins; a report matching none is accepted.
    Earlier rules guarantee later ones see non-null inputs."""
    v, kind = F.col("v"), F.col("v.type")
    host = F.col("host_node_id")
    safety = kind.isin(*PROVEN_TYPES)
    return [
        (v["error"].isNotNull(), "malformed", v["error"]),
        (
            F.col("host_keys").isNull(),
            "unknown_host",
            F.format_string("host node %d is not in the NodeRegistry", host),
        ),
        (
            v["host_signer"].isNull(),
            "bad_signature",
            F.concat(F.lit("host signature: "), v["host_signature_error"]),
        ),
        (
            ~F.array_contains(F.col("host_keys"), v["host_signer"]),
            "forged",
            F.format_string("signature does not recover to a registry key of host node %d", host),
        ),
        (
            ~kind.isin(*JUDGED_TYPES, *PROVEN_TYPES),
            "unknown_type",
            F.format_string("misbehavior type %d is not a known failure", kind),
        ),
        (
            safety & v["proof_error"].isNotNull(),
            "unverified_proof",
            v["proof_error"],
        ),
        (
            (kind == WITHHOLDING_ACCUSATION) & v["proof_error"].isNotNull(),
            "unverified_commitment",
            v["proof_error"],
        ),
    ]


def _rejection() -> tuple[Column, Column]:
    rules = _rejection_rules()
    code = _first_match([(c, F.lit(name)) for c, name, _ in rules])
    detail = _first_match([(c, text) for c, _, text in rules])
    return code, detail


def verified_reports(
    raw: DataFrame,
    registry: DataFrame,
    registry_keys: RegistryKeys,
    chain: ChainFacts | None = None,
) -> DataFrame:
    """One row per distinct (host, unsigned report), with `reason_code` null when accepted."""
    keys = registry.select("node_id", "keys")
    checked = raw.select(
        "report_id",
        "server_time_ns",
        "host_node_id",
        "report",
        verify_reports(registry_keys, chain)("report").alias("v"),
    ).join(F.broadcast(keys.toDF("host_node_id", "host_keys")), "host_node_id", "left")
    code, detail = _rejection()
    checked = checked.withColumn("reason_code", code).withColumn("reason", detail)
    # Duplicates: keep the accepted copy if any (a forged copy must not hide a real one).
    order = Window.partitionBy("host_node_id", "v.report_hash").orderBy(
        F.col("reason_code").isNotNull(), "report_id"
    )
    return (
        checked.withColumn("copy", F.row_number().over(order))
        .where("copy = 1")
        .select(
            "host_node_id",
            "report_id",
            "server_time_ns",
            F.col("v.report_hash").alias("report_hash"),
            F.col("v.reporter_time_ns").alias("reporter_time_ns"),
            F.col("v.misbehaving_node_id").cast("int").alias("misbehaving_node_id"),
            F.col("v.type").alias("type"),
            F.col("v.submitted_by_node").alias("submitted_by_node"),
            F.col("v.response_time_ns").alias("response_time_ns"),
            F.size(F.coalesce(F.col("v.envelopes"), F.array())).alias("envelope_count"),
            F.col("v.duplicate_originator").alias("duplicate_originator"),
            F.col("v.duplicate_sequence_id").alias("duplicate_sequence_id"),
            "reason_code",
            "reason",
        )
    )


# --- aggregation ------------------------------------------------------------------------------

_NS_PER_MINUTE = 60 * NS_PER_SECOND


def _type_name_column(column: str = "type") -> Column:
    kinds = [*range(9), *sorted(JUDGED_TYPES | PROVEN_TYPES)]
    names = F.create_map(*[F.lit(x) for k in kinds for x in (k, type_name(k))])
    return F.coalesce(names[F.col(column)], F.format_string("UNKNOWN_%d", F.col(column)))


def _window_start(window_minutes: int) -> Column:
    width = window_minutes * _NS_PER_MINUTE
    return (F.expr(f"reporter_time_ns div {width}") * width).alias("window_start_ns")


def _liveness(accepted: DataFrame, by_node: bool) -> DataFrame:
    kind = F.col("type").isin(*JUDGED_TYPES)
    return accepted.where(kind & (F.col("submitted_by_node") == F.lit(by_node)))


def liveness_windows(accepted: DataFrame, window_minutes: int) -> DataFrame:
    """Registered nodes' own reports only: the host filed it (`submitted_by_node`) and its
    signature recovered to the host's registry key (checked before acceptance). A node
    reporting itself is no peer. Whether a window flags its node is judged on the driver
    against the registry's history (`judge_liveness`)."""
    width = window_minutes * _NS_PER_MINUTE
    reporter = F.when(F.col("host_node_id") != F.col("misbehaving_node_id"), F.col("host_node_id"))
    return (
        _liveness(accepted, by_node=True)
        .groupBy("misbehaving_node_id", "type", _window_start(window_minutes))
        .agg(
            F.count("*").alias("report_count"),
            F.count_distinct(reporter).alias("distinct_reporters"),
            F.array_sort(F.collect_set(reporter)).alias("reporters"),
            F.max("response_time_ns").alias("max_response_time_ns"),
        )
        .withColumn("window_end_ns", F.col("window_start_ns") + width)
        .withColumn("window_start", F.timestamp_micros(F.expr("window_start_ns div 1000")))
        .withColumn("type_name", _type_name_column())
    )


def client_liveness_windows(accepted: DataFrame, window_minutes: int) -> DataFrame:
    """Client-submitted liveness reports, kept apart and attributed to the host that accepted
    them (a client report names no client or payer); they never flag anyone."""
    width = window_minutes * _NS_PER_MINUTE
    return (
        _liveness(accepted, by_node=False)
        .groupBy("misbehaving_node_id", "type", _window_start(window_minutes), "host_node_id")
        .agg(
            F.count("*").alias("report_count"),
            F.max("response_time_ns").alias("max_response_time_ns"),
        )
        .withColumn("window_end_ns", F.col("window_start_ns") + width)
        .withColumn("type_name", _type_name_column())
    )


def safety_proofs(accepted: DataFrame) -> DataFrame:
    return accepted.where(F.col("type").isin(*PROVEN_TYPES)).select(
        "misbehaving_node_id",
        "type",
        _type_name_column().alias("type_name"),
        "host_node_id",
        "report_id",
        "submitted_by_node",
        "reporter_time_ns",
        "envelope_count",
        "duplicate_originator",
        "duplicate_sequence_id",
        "report_hash",
    )


def proof_flags(proofs: DataFrame) -> DataFrame:
    return (
        proofs.groupBy("misbehaving_node_id", "type")
        .agg(
            F.lit("safety_proof").alias("basis"),
            F.count("*").alias("evidence_count"),
            F.count_distinct("host_node_id").alias("distinct_reporters"),
            F.min("reporter_time_ns").alias("first_time_ns"),
            F.max("reporter_time_ns").alias("last_time_ns"),
        )
        .withColumn("type_name", _type_name_column())
    )


def judge_liveness(
    windows: Sequence[Mapping[str, Any]], history: RegistryHistory, share: Fraction
) -> list[dict[str, Any]]:
    """Each window with what the registry's history says of it: `reporters` and
    `distinct_reporters` keep only reporters enabled throughout it, `needed` is the share of
    the nodes enabled in it, `flagged` whether they reach it (core.registry_history)."""
    judged = []
    for row in windows:
        verdict = judge_window(
            int(row["misbehaving_node_id"]),
            [int(r) for r in row["reporters"] or []],
            int(row["window_start_ns"]),
            int(row["window_end_ns"]),
            history,
            share,
        )
        judged.append(
            dict(
                row,
                reporters=list(verdict.counted),
                distinct_reporters=len(verdict.counted),
                enabled_nodes=verdict.enabled_others,
                needed=verdict.needed,
                flagged=verdict.flagged,
            )
        )
    return judged


def threshold_flags(windows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One flag per node and judged type with a flagged window."""
    flags: dict[tuple[int, int], dict[str, Any]] = {}
    for row in windows:
        if not row["flagged"]:
            continue
        key = (int(row["misbehaving_node_id"]), int(row["type"]))
        flag = flags.setdefault(
            key,
            {
                "misbehaving_node_id": key[0],
                "type": key[1],
                "basis": "liveness_threshold",
                "evidence_count": 0,  # windows at or over what was needed
                "distinct_reporters": 0,
                "first_time_ns": row["window_start_ns"],
                "last_time_ns": row["window_end_ns"],
                "type_name": row["type_name"],
            },
        )
        flag["evidence_count"] += 1
        flag["distinct_reporters"] = max(flag["distinct_reporters"], row["distinct_reporters"])
        flag["first_time_ns"] = min(flag["first_time_ns"], row["window_start_ns"])
        flag["last_time_ns"] = max(flag["last_time_ns"], row["window_end_ns"])
    return [flags[k] for k in sorted(flags)]


def rejected_reports(verified: DataFrame) -> DataFrame:
    return verified.where(F.col("reason_code").isNotNull()).select(
        "host_node_id",
        "report_id",
        "server_time_ns",
        "misbehaving_node_id",
        "type",
        "reason_code",
        "reason",
        "report_hash",
    )


# --- the job ----------------------------------------------------------------------------------


def _sorted_arrow(frame: DataFrame, *keys: str) -> pa.Table:
    return frame.orderBy(*keys).toArrow()


def aggregate(
    spark: SparkSession,
    files: ExportFiles,
    history: RegistryHistory,
    share: Fraction = DEFAULT_JUDGED_SHARE,
    window_minutes: int = DEFAULT_WINDOW_MINUTES,
    chain: ChainLookup | None = None,
) -> dict[str, pa.Table]:
    """The five result tables, plus `counts` (rows read, outcome per reason). `chain`
    looks up the transactions BLOCKCHAIN_INCONSISTENCY reports name (None: not checked)."""
    if not 0 < share < 1 or window_minutes < 1:
        raise ValueError("the judged share is between 0 and 1, window minutes positive")
    registry = history.keys()
    with spark_read_errors(f"reports under {', '.join(str(b) for b in files)}"):
        raw = load_reports(spark, files)
        facts = chain(named_transactions(raw)) if chain is not None else None
        verified = verified_reports(raw, registry_frame(spark, registry), registry, facts)
        verified = verified.persist(StorageLevel.MEMORY_AND_DISK)  # every output reads it
        try:
            accepted = verified.where(F.col("reason_code").isNull())
            windows = liveness_windows(accepted, window_minutes)
            clients = client_liveness_windows(accepted, window_minutes)
            proofs = safety_proofs(accepted)
            keys = ("misbehaving_node_id", "type")
            judged = judge_liveness(
                _sorted_arrow(windows, *keys, "window_start_ns").to_pylist(), history, share
            )
            by_proof = _sorted_arrow(proof_flags(proofs), *keys)
            flagged = pa.concat_tables(
                [by_proof, pa.Table.from_pylist(threshold_flags(judged), by_proof.schema)]
            ).sort_by([(k, "ascending") for k in (*keys, "basis")])
            return {
                "liveness": pa.Table.from_pylist(judged, _judged_schema(windows)),
                "client_liveness": _sorted_arrow(clients, *keys, "window_start_ns", "host_node_id"),
                "safety": _sorted_arrow(proofs, *keys, "reporter_time_ns", "host_node_id"),
                "flagged": flagged,
                "rejected": _sorted_arrow(rejected_reports(verified), "host_node_id", "report_id"),
                "counts": verified.groupBy("reason_code").count().toArrow(),
                "rows_read": pa.table({"rows": [raw.count()]}),
            }
        finally:
            verified.unpersist()


def _judged_schema(windows: DataFrame) -> pa.Schema:
    schema = windows.limit(0).toArrow().schema
    return (
        schema.append(pa.field("enabled_nodes", pa.int64()))
        .append(pa.field("needed", pa.int64()))
        .append(pa.field("flagged", pa.bool_()))
    )


def council_data(
    tables: Mapping[str, pa.Table],
    history: RegistryHistory,
    inputs: Sequence[str | Path],
    share: Fraction,
    window_minutes: int,
    refused: Mapping[str, str],
) -> CouncilData:
    by_reason = {
        str(r["reason_code"] or "accepted"): int(r["count"]) for r in tables["counts"].to_pylist()
    }
    return CouncilData(
        inputs=[str(i) for i in inputs],
        judged_share=str(share),
        window_minutes=window_minutes,
        rows_read=int(tables["rows_read"].column("rows")[0].as_py()),
        outcomes=by_reason,
        liveness=tables["liveness"].to_pylist(),
        safety=tables["safety"].to_pylist(),
        flagged=tables["flagged"].to_pylist(),
        refused_exports=dict(refused),
        registry_block=history.block,
    )


def write_outputs(out: str | Path, tables: Mapping[str, pa.Table], data: CouncilData) -> None:
    """The whole OUTDIR appears at once, or not at all."""
    with atomic_directory(out) as temp:
        for name in ("liveness", "client_liveness", "safety", "flagged", "rejected"):
            pq.write_table(tables[name], temp / f"{name}.parquet")
        (temp / "report.html").write_text(render_html(data), encoding="utf-8")
        (temp / "report.md").write_text(render_markdown(data), encoding="utf-8")


def run(
    spark: SparkSession,
    inputs: Sequence[str | Path],
    out: str | Path,
    registry: str | Path,
    share: Fraction = DEFAULT_JUDGED_SHARE,
    window_minutes: int = DEFAULT_WINDOW_MINUTES,
    chain: ChainLookup | None = None,
) -> CouncilData:
    """Validates inputs (InputError), aggregates, and writes OUTDIR atomically."""
    history = read_registry_history(registry)
    exports, refused = signed_exports(inputs, history, [REPORTS_DIR])
    files = find_report_files(inputs, exports)
    tables = aggregate(spark, files, history, share, window_minutes, chain)
    data = council_data(tables, history, inputs, share, window_minutes, refused)
    write_outputs(out, tables, data)
    return data


def _share(text: str) -> Fraction:
    try:
        share = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a fraction: {text!r}") from None
    if not 0 < share < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return share


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--input", action="append", required=True, help="export directory")
    parser.add_argument("--out", required=True, help="output directory (replaced atomically)")
    parser.add_argument(
        "--registry",
        required=True,
        help="the NodeRegistry's history, from `xnode chain registry-snapshot`",
    )
    parser.add_argument(
        "--judged-share",
        type=_share,
        default=DEFAULT_JUDGED_SHARE,
        help="judged reports flag a node when more than this share of the other enabled "
        "nodes (and at least two) report it in one window (XIP-49 3.2.7's 'sufficiently "
        "large sample'; default 1/3)",
    )
    parser.add_argument("--window-minutes", type=int, default=DEFAULT_WINDOW_MINUTES)
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument(
        "--chain-rpc-url",
        default=None,
        help="JSON-RPC URL of the app chain: BLOCKCHAIN_INCONSISTENCY reports are checked there",
    )
    parser.add_argument(
        "--contracts-file", default=None, help="the contracts file nodes use (with --chain-rpc-url)"
    )
    args = parser.parse_args(argv)
    if args.window_minutes < 1:
        parser.error("--window-minutes must be positive")
    if (args.chain_rpc_url is None) != (args.contracts_file is None):
        parser.error("--chain-rpc-url and --contracts-file go together")
    return args


def chain_lookup(url: str | None, contracts_file: str | None) -> ChainLookup | None:
    """Reads the chain for the named transactions, or None without a chain."""
    if url is None or contracts_file is None:
        return None
    contracts = payload_contracts(contracts_file)
    return lambda txs: fetch_chain_facts(url, contracts, txs)


def council_on(
    spark: SparkSession,
    registry: Path,
    chain_rpc_url: str | None = None,
    contracts_file: str | None = None,
) -> Callable[[list[Path], Path], dict[int, set[str]]]:
    """The job as a function of export directories and an output directory, returning each
    flagged node and the bases of its flags (the byzantine harness, docs/evidence.md);
    `registry`: the registry snapshot file, read when the job runs."""
    lookup = chain_lookup(chain_rpc_url, contracts_file)

    def council(inputs: list[Path], out: Path) -> dict[int, set[str]]:
        return run(spark, inputs, out, registry, chain=lookup).flagged_by_basis()

    return council


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        # Before the JVM starts, so bad input fails fast.
        history = read_registry_history(args.registry)
        exports, refused = signed_exports(args.input, history, [REPORTS_DIR])
        for path, reason in sorted(refused.items()):
            print(f"misbehavior_aggregation: refused export {path}: {reason}", file=sys.stderr)
        files = find_report_files(args.input, exports)
        chain = chain_lookup(args.chain_rpc_url, args.contracts_file)
        spark = build_session(args.master, app_name="xnode-misbehavior-aggregation")
        share, minutes = args.judged_share, args.window_minutes
        try:
            tables = aggregate(spark, files, history, share, minutes, chain)
        finally:
            spark.stop()
        data = council_data(tables, history, args.input, share, minutes, refused)
        write_outputs(args.out, tables, data)
    except InputError as exc:
        print(f"misbehavior_aggregation: error: {one_line(exc)}", file=sys.stderr)
        return 2
    flagged = sorted({int(r["misbehaving_node_id"]) for r in data.flagged})
    print(
        f"misbehavior_aggregation: {data.outcomes.get('accepted', 0)} accepted, "
        f"{data.rejected} rejected ({data.outcomes.get('forged', 0)} forged), "
        f"flagged nodes {flagged or 'none'} -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
