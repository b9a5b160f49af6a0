"""`xnode export`: incremental, crash-safe export of one node's database to Parquet.

Joins three adapters: the store's pages (xnode.store.export), the Parquet writer
(xnode.export.writer) and the registry the node itself would use (xnode.server.bootstrap,
xnode.chain)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from xnode.chain.node import ChainConnection, connect_chain
from xnode.chain.verify import ChainSetupError
from xnode.commands.database import connection
from xnode.config import Settings
from xnode.core.crypto import SigningKey
from xnode.core.registry import NodeEntry
from xnode.export.manifest import MANIFEST_FILE, sign_manifest
from xnode.export.writer import (
    ExportError,
    ExportState,
    ExportWriter,
    LogSnapshotWriter,
    write_text_atomic,
)
from xnode.server.bootstrap import StartupError, open_registry
from xnode.store.export import ExportSource, ExportSourceError, Pending

DEFAULT_PAGE_ROWS = 10_000


@dataclass(frozen=True, slots=True)
class ExportSummary:
    node_id: int
    directory: Path
    envelopes: int
    originators: int
    reports: int
    files: int
    leftovers_removed: int
    signed: bool = True

    def describe(self) -> str:
        text = (
            f"node {self.node_id}: exported {self.envelopes} envelopes of "
            f"{self.originators} originators and {self.reports} misbehavior reports "
            f"({self.files} files) to {self.directory}"
        )
        if self.leftovers_removed:
            text += f"; removed {self.leftovers_removed} files of an interrupted export"
        if not self.signed:
            text += "; UNSIGNED (no signer key configured): the council's jobs refuse it"
        return text


async def registry_entries(settings: Settings, node_id: int, public_key: bytes) -> list[NodeEntry]:
    """The registry the node itself would use (file or chain); without one, just this node."""
    chain: ChainConnection | None = None
    try:
        if settings.chain_enabled:
            chain = await connect_chain(settings)
        source = await open_registry(settings, chain)
    except (StartupError, ChainSetupError) as exc:
        raise ExportError(f"cannot read the node registry: {exc}") from None
    finally:
        if chain is not None:
            await chain.close()
    if source is None:
        return [NodeEntry(node_id, public_key, "", True)]
    return list(source.current().nodes.values())


def export_key(settings: Settings, public_key: bytes) -> SigningKey | None:
    """The node's own signer key: it signs the export's manifest, so that the export reads as
    the node's and nobody else's (docs/export-format.md). Without a configured key the export
    is unsigned, and the council's jobs refuse it."""
    if settings.signer_key is None and settings.signer_key_file is None:
        return None
    try:
        key = settings.signing_key()
    except (ValueError, OSError) as exc:
        raise ExportError(f"cannot sign the export: {exc}") from None
    if key.public_key != public_key:
        raise ExportError(
            "cannot sign the export: the configured signer key is not this database's node key"
        )
    return key


async def export_node(
    settings: Settings,
    out: Path,
    with_payloads: bool = False,
    page_rows: int = DEFAULT_PAGE_ROWS,
    show_progress: bool = True,
    with_logs: bool = False,
) -> ExportSummary:
    async with connection(settings.database_dsn, ExportError) as conn:
        source = ExportSource(conn)
        try:
            node_id, public_key = await source.node_identity()
        except ExportSourceError as exc:
            raise ExportError(str(exc)) from None
        key = export_key(settings, public_key)
        entries = await registry_entries(settings, node_id, public_key)
        writer = ExportWriter(out, node_id)
        with writer.locked():
            state = writer.load_state()
            removed = writer.remove_unfinished(state)
            pending = await source.pending(state.envelopes, state.reports)
            writer.write_nodes(entries)
            with _progress(pending, show_progress) as bar:
                files = await _copy(source, writer, state, pending, bar, page_rows, with_payloads)
            if with_logs:
                files += await _copy_logs(source, writer, page_rows)
            writer.save_state(state)  # also when nothing was new: records when it ran
            if key is not None:
                manifest = sign_manifest(writer.directory, node_id, key, time.time_ns())
                write_text_atomic(manifest, writer.directory / MANIFEST_FILE)
            else:  # an older manifest would no longer match: it goes
                (writer.directory / MANIFEST_FILE).unlink(missing_ok=True)
    return ExportSummary(
        node_id,
        writer.directory,
        pending.envelope_count,
        len(pending.envelope_tops),
        pending.report_count,
        files,
        removed,
        signed=key is not None,
    )


@dataclass
class _Bar:
    progress: Progress
    envelopes: TaskID
    reports: TaskID


@contextmanager
def _progress(pending: Pending, enabled: bool) -> Iterator[_Bar]:
    progress = Progress(
        TextColumn("{task.description:<20}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    )
    with progress:
        yield _Bar(
            progress,
            progress.add_task("envelopes", total=pending.envelope_count),
            progress.add_task("misbehavior reports", total=pending.report_count),
        )


async def _copy(
    source: ExportSource,
    writer: ExportWriter,
    state: ExportState,
    pending: Pending,
    bar: _Bar,
    page_rows: int,
    with_payloads: bool,
) -> int:
    """Copies page by page; the watermark moves after each page's files are in place."""
    files = 0
    for originator, top in sorted(pending.envelope_tops.items()):
        after = state.envelopes.get(originator, 0)
        async for page in source.envelope_pages(originator, after, top, page_rows, with_payloads):
            files += len(writer.write_envelopes(page))
            state.envelopes[originator] = page.sequence_ids[-1]
            writer.save_state(state)
            bar.progress.advance(bar.envelopes, len(page.sequence_ids))
    async for reports in source.report_pages(state.reports, pending.report_top, page_rows):
        files += len(writer.write_reports(reports))
        state.reports = reports.ids[-1]
        writer.save_state(state)
        bar.progress.advance(bar.reports, len(reports.ids))
    return files


async def _copy_logs(source: ExportSource, writer: ExportWriter, page_rows: int) -> int:
    """The committed logs, whole (LogSnapshotWriter): leaves, checkpoints, forks."""
    with LogSnapshotWriter(writer.directory) as logs:
        async for page in source.leaf_pages(page_rows):
            by_originator: dict[int, tuple[list[int], list[bytes], list[int | None]]] = {}
            for originator, sequence_id, leaf, expiry in page:
                ids, leaves, expiries = by_originator.setdefault(originator, ([], [], []))
                ids.append(sequence_id)
                leaves.append(bytes(leaf))
                expiries.append(expiry)
            for originator, (ids, leaves, expiries) in by_originator.items():
                logs.leaves(originator, ids, leaves, expiries)
        async for rows in source.checkpoint_pages(page_rows):
            logs.checkpoints([(r[1], r[2], bytes(r[3]), r[4]) for r in rows])
        async for rows in source.fork_pages(page_rows):
            logs.forks([(r[0], r[1], bytes(r[2]), bytes(r[3])) for r in rows])
        return logs.parts
