"""`xnode audit`: replays a node's whole stored history through xnode.core.audit.

Joins the store's streamed snapshot (xnode.store.audit), the registry the node itself would
use (file or chain, as its settings say) and, when the chain is configured, the contracts'
logs that the chain payloads were indexed from."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import asyncpg
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from xnode.chain import abi
from xnode.chain.node import ChainConnection, connect_chain
from xnode.chain.rpc import ChainRpcError, ChainUnavailable
from xnode.chain.verify import ChainSetupError
from xnode.commands.database import DATABASE_ERRORS, connection
from xnode.commands.export import registry_entries
from xnode.config import Settings
from xnode.core.audit import (
    FaultKind,
    OriginatorAudit,
    Verdict,
    audit_chain_events,
    audit_conflict,
)
from xnode.core.chain_payloads import ChainEvent, MalformedPayload
from xnode.core.registry import Registry, RegistryKeys
from xnode.export.writer import ExportError
from xnode.replication.scrub import OwnKey, PassCount, Scrub, ScrubRefused
from xnode.store.audit import AuditSource
from xnode.store.export import ExportSource, ExportSourceError
from xnode.store.scrub import ScrubStore

CHAIN_PAGE_BLOCKS = 2000


class AuditError(RuntimeError):
    """The audit could not run (exit code 2); the message says why."""


@dataclass(frozen=True, slots=True)
class AuditOptions:
    chain: bool = True  # check chain payloads against the contracts' logs when configured
    show_progress: bool = True
    now_unix: int | None = None  # when expiry is judged (None: now)


async def _registry(settings: Settings, conn: asyncpg.Connection) -> tuple[Registry, OwnKey]:
    """The registry the node would use, and the node's own id and key (its database's)."""
    try:
        node_id, public_key = await ExportSource(conn).node_identity()
        entries = await registry_entries(settings, node_id, public_key)
    except (ExportSourceError, ExportError) as exc:
        raise AuditError(str(exc)) from None
    return Registry(entries), OwnKey(node_id, public_key)


async def scrub_node(settings: Settings) -> PassCount:
    """`xnode audit --repair`: one scrub pass over the whole store, now (replication.scrub):
    envelopes whose bytes their leaf does not commit to (or whose signature is not their
    originator's) are withdrawn, so they are no longer served; they and the losses are
    fetched again from peers by the node's repair."""
    async with connection(settings.database_dsn, AuditError) as conn:
        registry, own = await _registry(settings, conn)
        keys = registry.public_keys()
        try:
            return await Scrub(ScrubStore(conn), 0, keys=lambda: keys, own=own).one_pass()
        except ScrubRefused as exc:
            raise AuditError(str(exc)) from None
        except DATABASE_ERRORS as exc:
            raise AuditError(f"the database failed during the repair: {exc}") from None


async def audit_node(settings: Settings, options: AuditOptions = AuditOptions()) -> Verdict:
    async with connection(settings.database_dsn, AuditError) as conn:
        keys = (await _registry(settings, conn))[0].keys()
        verdict = Verdict()
        try:
            async with AuditSource(conn).snapshot() as source:
                now = options.now_unix if options.now_unix is not None else int(time.time())
                await _audit_logs(source, keys, verdict, options.show_progress, now)
                async for c in source.conflicts():
                    audit_conflict(
                        c.originator_node_id, c.sequence_id, c.versions, c.log_raw, keys, verdict
                    )
                if options.chain and settings.chain_enabled:
                    await _audit_chain(settings, source, verdict)
        except DATABASE_ERRORS as exc:
            raise AuditError(f"the database failed during the audit: {exc}") from None
    return verdict


async def _audit_logs(
    source: AuditSource, keys: RegistryKeys, verdict: Verdict, show: bool, now_unix: int
) -> None:
    with _Progress(await source.row_count(), show) as advance:
        for originator in await source.originators():
            audit = OriginatorAudit(
                originator,
                keys,
                await source.checkpoints(originator),
                await source.forked(originator),
                verdict,
                now_unix,
            )
            async for sequence_id, leaf, raw, expiry in source.rows(originator):
                audit.row(sequence_id, leaf, raw, expiry)
                advance()
            audit.finish()


class _Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self._bar = Progress(
            TextColumn("auditing"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            disable=not enabled,
        )
        self._task = self._bar.add_task("rows", total=total)
        self._pending = 0

    def _advance(self) -> None:
        self._pending += 1
        if self._pending >= 1000:  # one refresh per thousand rows, not per row
            self._bar.advance(self._task, self._pending)
            self._pending = 0

    def __enter__(self) -> Callable[[], None]:
        self._bar.__enter__()
        return self._advance

    def __exit__(self, *exc: object) -> None:
        self._bar.advance(self._task, self._pending)
        self._bar.__exit__(None, None, None)


async def _audit_chain(settings: Settings, source: AuditSource, verdict: Verdict) -> None:
    """Every contract event up to the block the node has indexed, against what it stored."""
    indexed = await source.indexed_block()
    if indexed is None:
        return
    try:
        chain = await connect_chain(settings)
    except ChainSetupError as exc:
        raise AuditError(f"cannot reach the chain: {exc}") from None
    try:
        matched = 0
        async for page in _event_pages(chain, indexed):
            stored = await source.chain_envelopes([(e.originator, e.sequence_id) for e in page])
            pairs = [(e, stored.get((e.originator, e.sequence_id))) for e in page]
            matched += sum(1 for _, raw in pairs if raw is not None)
            audit_chain_events(pairs, verdict)
    except (ChainUnavailable, ChainRpcError) as exc:
        raise AuditError(f"the chain failed during the audit: {exc}") from None
    finally:
        await chain.close()
    extra = await source.chain_payloads_up_to(indexed) - matched
    if extra > 0:
        verdict.fault(
            FaultKind.CHAIN_PAYLOAD_WITHOUT_EVENT,
            0,
            indexed,
            f"{extra} chain payloads match no event",
        )


async def _event_pages(chain: ChainConnection, last: int) -> AsyncIterator[list[ChainEvent]]:
    contracts = chain.contracts
    addresses = [contracts.group_messages, contracts.identity_updates]
    topics = [abi.MESSAGE_SENT, abi.IDENTITY_UPDATE_CREATED]
    for first in range(contracts.deployment_block, last + 1, CHAIN_PAGE_BLOCKS):
        logs = await chain.rpc.logs(
            first, min(first + CHAIN_PAGE_BLOCKS - 1, last), addresses, topics
        )
        page: list[ChainEvent] = []
        for entry in logs:
            try:
                page.append(abi.decode_payload_log(entry))
            except MalformedPayload:
                continue  # undecodable topics or data: the indexer skipped it too
        if page:
            yield page
