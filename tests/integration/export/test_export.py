"""`xnode export`: layout and schema of docs/export-format.md, incremental watermarks, several
nodes side by side, payloads, and recovery from an interrupted export."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import NodeSpec, node_settings
from tests.integration.export.helpers import (
    DAY_S,
    NS_PER_S,
    Item,
    add_reports,
    chain_row,
    group,
    publish,
    received_row,
    run_cli_async,
    store_received,
    table_rows,
)
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.commands.export import export_node
from xnode.config import Settings
from xnode.core.topics import TopicKind
from xnode.devtools.postgres import free_port
from xnode.export.manifest import read_manifest, verify_export
from xnode.export.writer import ExportError, ExportWriter

# docs/export-format.md, written out here rather than imported: this is the contract.
ENVELOPE_SCHEMA = pa.schema(
    [
        ("originator_sequence_id", pa.int64()),
        ("originator_ns", pa.int64()),
        ("topic", pa.binary()),
        ("topic_kind", pa.int8()),
        ("expiry_unixtime", pa.int64()),
        ("payer_address", pa.binary(20)),
        ("size_bytes", pa.int32()),
        ("base_fee_picodollars", pa.int64()),
        ("congestion_fee_picodollars", pa.int64()),
    ]
)
WITH_PAYLOAD = ENVELOPE_SCHEMA.append(pa.field("originator_envelope", pa.binary()))
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
ALL_KINDS = [
    Item(TopicKind.GROUP_MESSAGES, group(1), b"hello"),
    Item(TopicKind.WELCOME_MESSAGES, group(2), b"welcome"),
    Item(TopicKind.KEY_PACKAGES, group(3), b"key package"),
    Item(TopicKind.IDENTITY_UPDATES, group(4), b"sig"),
    Item(TopicKind.GROUP_MESSAGES, group(1), b"short-lived", retention_days=1),
]


def utc_day(ns: int) -> str:
    return datetime.datetime.fromtimestamp(ns // NS_PER_S, datetime.UTC).strftime("%Y-%m-%d")


def partition(path: Path, name: str) -> str:
    return next(p.partition("=")[2] for p in path.parts if p.startswith(name + "="))


def envelope_files(node_dir: Path) -> list[Path]:
    return sorted((node_dir / "envelopes").rglob("*.parquet"))


def read_envelopes(node_dir: Path, schema: pa.Schema = ENVELOPE_SCHEMA) -> list[dict[str, Any]]:
    """Every exported envelope row, with its partition values; checks each file's schema."""
    rows = []
    for path in envelope_files(node_dir):
        table = pq.read_table(path)
        assert table.schema.remove_metadata() == schema, path
        for row in table.to_pylist():
            row["originator_node_id"] = int(partition(path, "originator_node_id"))
            row["day"] = partition(path, "day")
            rows.append(row)
    return rows


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def read_state(node_dir: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((node_dir / "_export_state.json").read_text())
    return state


async def export(
    dsn: str, out: Path, spec: NodeSpec | None = None, node_id: int = 100, **kwargs: Any
) -> Any:
    """`xnode export` of node `node_id`'s database, signed with its key when `spec` is given."""
    settings = Settings(**node_settings(dsn, spec, node_id)) if spec else Settings(database_dsn=dsn)
    return await export_node(settings, out, show_progress=False, **kwargs)


async def test_layout_schema_and_values_follow_the_contract(
    start_node: Any, database: str, node_spec: NodeSpec, tmp_path: Path
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    await publish(node.address, 100, ALL_KINDS)
    old_ns = (int(time.time()) - 400 * DAY_S) * NS_PER_S
    old = received_row(
        200, node_spec.keys[200], 1, old_ns, Item(TopicKind.GROUP_MESSAGES, group(9))
    )
    chain = chain_row(1, 1, time.time_ns(), Item(TopicKind.IDENTITY_UPDATES, group(5)))
    await store_received(database, [old, chain])
    await add_reports(database, node_spec.keys[100], [200, 300])

    summary = await export(database, tmp_path, node_spec)

    node_dir = tmp_path / "node-100"
    assert (summary.envelopes, summary.originators, summary.reports) == (7, 3, 2)
    assert listing(node_dir) == [
        "_export_state.json",
        "envelopes",
        "manifest.json",
        "misbehavior_reports",
        "nodes.parquet",
    ]
    # Signed by the node's key, over every file it wrote (docs/export-format.md).
    manifest = read_manifest(node_dir, [node_spec.keys[100].public_key])
    assert manifest.node_id == 100
    assert sorted(manifest.files) == sorted(
        p.relative_to(node_dir).as_posix()
        for p in node_dir.rglob("*")
        if p.is_file() and p.name not in ("manifest.json", ".export.lock")
    )
    verify_export(node_dir, 100, [node_spec.keys[100].public_key], [""])
    stored = await table_rows(database)
    exported = read_envelopes(node_dir)
    assert sorted((r["originator_node_id"], r["originator_sequence_id"]) for r in exported) == (
        sorted(stored)
    )
    for row in exported:
        db = stored[row["originator_node_id"], row["originator_sequence_id"]]
        assert row["originator_ns"] == db["originator_ns"]
        assert row["day"] == utc_day(db["originator_ns"])
        assert row["topic"] == db["topic"] and row["topic_kind"] == db["topic"][0]
        assert row["expiry_unixtime"] == (db["expiry_unixtime"] or 0)
        assert row["payer_address"] == db["payer_address"]
        assert row["size_bytes"] == len(db["envelope"])
    by_key = {(r["originator_node_id"], r["originator_sequence_id"]): r for r in exported}
    assert by_key[1, 1]["payer_address"] is None and by_key[1, 1]["expiry_unixtime"] == 0
    assert by_key[100, 4]["topic_kind"] == 2 and by_key[100, 4]["expiry_unixtime"] == 0
    assert by_key[200, 1]["day"] == utc_day(old_ns)

    report_files = sorted((node_dir / "misbehavior_reports").rglob("*.parquet"))
    assert [partition(p, "day") for p in report_files] == [utc_day(time.time_ns())]
    reports = pq.read_table(report_files[0])
    assert reports.schema.remove_metadata() == REPORT_SCHEMA
    assert reports.column("host_node_id").to_pylist() == [100, 100]
    assert reports.column("misbehaving_node_id").to_pylist() == [200, 300]
    assert reports.column("report_id").to_pylist() == [1, 2]
    signed = mb.MisbehaviorReport.FromString(reports.column("report")[0].as_py())
    assert signed.server_time_ns == reports.column("server_time_ns")[0].as_py()

    nodes = pq.read_table(node_dir / "nodes.parquet")
    assert nodes.schema.remove_metadata() == NODES_SCHEMA
    assert nodes.to_pylist() == [
        {"node_id": n, "public_key": k.public_key, "enabled": True}
        for n, k in sorted(node_spec.keys.items())
    ]
    state = read_state(node_dir)
    assert state["node_id"] == 100
    assert state["envelopes"] == {"1": 1, "100": 5, "200": 1}
    assert state["reports"] == 2 and state["exported_at_ns"] > 0


async def test_second_export_writes_only_new_rows(
    start_node: Any, database: str, node_spec: NodeSpec, tmp_path: Path
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    await publish(node.address, 100, [Item(TopicKind.GROUP_MESSAGES, group(1))] * 5)
    await add_reports(database, node_spec.keys[100], [200])
    await export(database, tmp_path, node_spec, page_rows=2)
    node_dir = tmp_path / "node-100"
    before = {p: p.read_bytes() for p in envelope_files(node_dir)}
    assert len(before) == 3  # pages of 2: 1-2, 3-4, 5

    await publish(node.address, 100, [Item(TopicKind.GROUP_MESSAGES, group(1))] * 3)
    await add_reports(database, node_spec.keys[100], [300])
    second = await export(database, tmp_path, node_spec, page_rows=2)

    assert (second.envelopes, second.reports) == (3, 1)
    after = envelope_files(node_dir)
    assert all(p.read_bytes() == content for p, content in before.items())
    new = [p for p in after if p not in before]
    seqs = [pq.read_table(p).column("originator_sequence_id").to_pylist() for p in new]
    assert sorted(s for part in seqs for s in part) == [6, 7, 8]
    assert read_state(node_dir)["envelopes"] == {"100": 8}
    assert read_state(node_dir)["reports"] == 2
    ids = pq.read_table(node_dir / "misbehavior_reports").column("report_id").to_pylist()
    assert sorted(ids) == [1, 2]

    third = await export(database, tmp_path, node_spec)
    assert (third.envelopes, third.reports, third.files) == (0, 0, 0)
    assert envelope_files(node_dir) == after


async def test_exports_of_two_nodes_sit_side_by_side(
    start_node: Any, new_database: Any, node_spec: NodeSpec, tmp_path: Path
) -> None:
    dsns = {100: new_database(), 200: new_database()}
    for node_id, dsn in dsns.items():
        node = await start_node(**node_settings(dsn, node_spec, node_id))
        await publish(node.address, node_id, [Item(TopicKind.GROUP_MESSAGES, group(node_id))] * 2)
    out = tmp_path / "export"
    for node_id, dsn in dsns.items():
        await export(dsn, out, node_spec, node_id)
    await publish(node.address, 200, [Item(TopicKind.GROUP_MESSAGES, group(7))])
    await export(dsns[200], out, node_spec, 200)  # one node's export leaves the other's alone

    assert listing(out) == ["node-100", "node-200"]
    for node_id, count in ((100, 2), (200, 3)):
        node_dir = out / f"node-{node_id}"
        rows = read_envelopes(node_dir)
        assert {r["originator_node_id"] for r in rows} == {node_id}
        assert sorted(r["originator_sequence_id"] for r in rows) == list(range(1, count + 1))
        assert read_state(node_dir) | {"exported_at_ns": 0} == {
            "node_id": node_id,
            "envelopes": {str(node_id): count},
            "reports": 0,
            "exported_at_ns": 0,
        }
        verify_export(node_dir, node_id, [node_spec.keys[node_id].public_key], [""])
    # Spark reads both at once as one hive-partitioned dataset per node directory.
    assert pq.ParquetDataset(out / "node-200" / "envelopes").read().num_rows == 3


async def test_with_payloads_adds_the_signed_envelopes(
    start_node: Any, database: str, node_spec: NodeSpec, tmp_path: Path
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    published = await publish(node.address, 100, ALL_KINDS)
    await export(database, tmp_path / "with", node_spec, with_payloads=True)
    await export(database, tmp_path / "without", node_spec)

    rows = read_envelopes(tmp_path / "with" / "node-100", WITH_PAYLOAD)
    rows.sort(key=lambda r: r["originator_sequence_id"])
    assert [r["originator_envelope"] for r in rows] == published
    assert [r["size_bytes"] for r in rows] == [len(p) for p in published]
    assert len(read_envelopes(tmp_path / "without" / "node-100")) == len(published)


async def test_interrupted_export_neither_loses_nor_duplicates_rows(
    start_node: Any,
    database: str,
    node_spec: NodeSpec,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    await publish(node.address, 100, [Item(TopicKind.GROUP_MESSAGES, group(1))] * 7)
    real_save = ExportWriter.save_state
    saves = 0

    def crash_on_second_save(self: ExportWriter, state: Any) -> None:
        nonlocal saves
        saves += 1
        if saves == 2:  # page 2's files are in place, its watermark is not
            raise KeyboardInterrupt
        real_save(self, state)

    monkeypatch.setattr(ExportWriter, "save_state", crash_on_second_save)
    with pytest.raises(KeyboardInterrupt):
        await export(database, tmp_path, node_spec, page_rows=3)
    monkeypatch.setattr(ExportWriter, "save_state", real_save)
    node_dir = tmp_path / "node-100"
    assert read_state(node_dir)["envelopes"] == {"100": 3}
    day_dir = envelope_files(node_dir)[0].parent
    (day_dir / ".seq-x.parquet.123.tmp").write_bytes(b"half a file")

    # Other page boundaries this time: a file left by the crash would now duplicate rows.
    summary = await export(database, tmp_path, node_spec, page_rows=5)

    assert summary.leftovers_removed == 2
    seqs = sorted(r["originator_sequence_id"] for r in read_envelopes(node_dir))
    assert seqs == list(range(1, 8))
    assert not list(day_dir.glob(".*"))


async def test_registry_snapshot_without_a_registry_is_this_node(
    start_node: Any, database: str, node_spec: NodeSpec, tmp_path: Path
) -> None:
    await start_node(**node_settings(database, node_spec))
    summary = await export(database, tmp_path)  # no nodes file: only node_info is known
    nodes = pq.read_table(tmp_path / "node-100" / "nodes.parquet").to_pylist()
    assert nodes == [
        {"node_id": 100, "public_key": node_spec.keys[100].public_key, "enabled": True}
    ]
    # Nor a signer key: the export is unsigned, says so, and holds no manifest.
    assert "UNSIGNED (no signer key configured)" in summary.describe()
    assert not (tmp_path / "node-100" / "manifest.json").exists()


async def test_an_export_is_signed_only_with_its_own_node_key(
    start_node: Any, database: str, node_spec: NodeSpec, tmp_path: Path
) -> None:
    await start_node(**node_settings(database, node_spec))
    other = Settings(**node_settings(database, node_spec, signer_key=node_spec.keys[200].hex()))
    with pytest.raises(ExportError, match="the configured signer key is not this database's"):
        await export_node(other, tmp_path, show_progress=False)


async def test_refusals_are_clear(
    start_node: Any, database: str, new_database: Any, node_spec: NodeSpec, tmp_path: Path
) -> None:
    unused = new_database()
    with pytest.raises(ExportError, match="node_info is empty"):
        await export(unused, tmp_path)
    await start_node(**node_settings(database, node_spec))
    with ExportWriter(tmp_path, 100).locked(), pytest.raises(ExportError, match="another export"):
        await export(database, tmp_path)
    state = tmp_path / "node-100" / "_export_state.json"
    state.write_text('{"node_id": 100}')
    with pytest.raises(ExportError, match="unreadable watermark"):
        await export(database, tmp_path)
    state.write_text('{"node_id": 200, "envelopes": {}, "reports": 0}')
    with pytest.raises(ExportError, match="belongs to node 200"):
        await export(database, tmp_path)
    nobody = f"postgresql://postgres@127.0.0.1:{free_port()}/xnode"  # nothing listens there
    with pytest.raises(ExportError, match=r"^cannot connect to the database: "):
        await export(nobody, tmp_path)


async def test_cli_exports_and_reports_errors(
    start_node: Any, database: str, new_database: Any, node_spec: NodeSpec, tmp_path: Path
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    await publish(node.address, 100, [Item(TopicKind.GROUP_MESSAGES, group(1))] * 3)
    out = str(tmp_path / "out")
    ok = await run_cli_async(
        "export",
        "--out",
        out,
        "--database-dsn",
        database,
        "--nodes-file",
        str(node_spec.nodes_file),
    )
    assert ok.returncode == 0, ok.stderr
    assert "node 100: exported 3 envelopes of 1 originators and 0 misbehavior reports" in ok.stdout
    assert (tmp_path / "out" / "node-100" / "_export_state.json").exists()

    bad = await run_cli_async("export", "--out", out, "--database-dsn", new_database())
    assert bad.returncode == 2
    assert "xnode export: node_info is empty" in bad.stderr
    assert "Traceback" not in bad.stderr
