"""The command line of `xnode export` and `xnode prune`: the daemon's side of the Spark data
pipeline."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from xnode.config import add_settings_flags, settings_from_args


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _cmd_export(args: argparse.Namespace) -> int:
    from xnode.commands.export import export_node
    from xnode.export.writer import ExportError

    settings = settings_from_args(args)
    try:
        summary = asyncio.run(
            export_node(
                settings,
                Path(args.out),
                args.with_payloads,
                args.batch_size,
                with_logs=args.with_logs,
            )
        )
    except ExportError as exc:
        print(f"xnode export: {exc}", file=sys.stderr)
        return 2
    print(summary.describe())
    return 0


def _cmd_prune(args: argparse.Namespace) -> int:
    from xnode.commands.prune import PruneError, apply_plan, describe

    settings = settings_from_args(args)
    try:
        plan, result = asyncio.run(
            apply_plan(settings, Path(args.plan), args.batch_size, args.dry_run)
        )
    except PruneError as exc:
        print(f"xnode prune: {exc}", file=sys.stderr)
        return 2
    print(describe(plan, result, args.dry_run))
    return 0


def _cmd_partitions(args: argparse.Namespace) -> int:
    from xnode.commands.partitions import PartitionsError, describe, maintain_once

    settings = settings_from_args(args)
    try:
        done = asyncio.run(maintain_once(settings, args.now))
    except PartitionsError as exc:
        print(f"xnode partitions: {exc}", file=sys.stderr)
        return 2
    print(describe(done))
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    from xnode.commands.audit import AuditError, AuditOptions, audit_node, scrub_node

    settings = settings_from_args(args)
    options = AuditOptions(chain=not args.no_chain, show_progress=not args.no_progress)
    try:
        if args.repair:
            scrubbed = asyncio.run(scrub_node(settings))
            print(
                f"repair: {scrubbed.checked} leaves checked, {scrubbed.withdrawn} envelopes "
                "withdrawn (bytes their leaf does not commit to); withdrawn and lost envelopes "
                "are fetched again from peers by the node's repair"
            )
        verdict = asyncio.run(audit_node(settings, options))
    except AuditError as exc:
        print(f"xnode audit: could not run: {exc}", file=sys.stderr)
        return 2
    print(verdict.describe())
    return 0 if verdict.clean else 1


def add_audit_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = sub.add_parser(
        "audit",
        help="re-check the node's whole stored history (exit 0 clean, 1 faults, 2 not run)",
    )
    add_settings_flags(audit)
    audit.add_argument(
        "--no-chain", action="store_true", help="skip the chain payloads vs contract logs check"
    )
    audit.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    audit.add_argument(
        "--repair",
        action="store_true",
        help="first withdraw stored envelopes that do not match their leaves (one scrub pass;"
        " the running node fetches them and any lost ones again from its peers)",
    )
    audit.set_defaults(func=_cmd_audit)


def add_export_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = sub.add_parser(
        "export", help="export envelope metadata and misbehavior reports to Parquet"
    )
    add_settings_flags(export)
    export.add_argument("--out", required=True, help="export root; writes <out>/node-<id>/")
    export.add_argument(
        "--with-payloads", action="store_true", help="also export the signed envelopes"
    )
    export.add_argument(
        "--with-logs",
        action="store_true",
        help="also export the committed logs (leaf hashes, checkpoints, forks) for the audit job",
    )
    export.add_argument(
        "--batch-size", type=_positive, default=10_000, help="rows per database page and file"
    )
    export.set_defaults(func=_cmd_export)
    prune = sub.add_parser("prune", help="delete the envelopes a retention plan names")
    add_settings_flags(prune)
    prune.add_argument("--plan", required=True, help="plan JSON from spark_jobs.retention_expiry")
    prune.add_argument(
        "--batch-size", type=_positive, default=5000, help="most ids one transaction covers"
    )
    prune.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    prune.set_defaults(func=_cmd_prune)
    partitions = sub.add_parser(
        "partitions",
        help="one retention run by hand: add envelope partitions ahead, drop wholly expired ones",
    )
    add_settings_flags(partitions)
    partitions.add_argument(
        "--now", type=int, default=None, help="unix seconds to expire at (default: now)"
    )
    partitions.set_defaults(func=_cmd_partitions)


def _cmd_watchdog(args: argparse.Namespace) -> int:
    from xnode.commands.watch import WatchdogError, watch

    settings = settings_from_args(args)
    try:
        asyncio.run(watch(settings, once=args.once))
    except WatchdogError as exc:
        print(f"xnode watchdog: {exc}", file=sys.stderr)
        return 2
    return 0


def add_watchdog_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    watchdog = sub.add_parser(
        "watchdog",
        help="probe every registered node's client APIs and file the misbehavior it proves "
        "(XIP-49 3.2.7; docs/watchdog.md)",
    )
    add_settings_flags(watchdog)
    watchdog.add_argument("--once", action="store_true", help="one round of probes, then exit")
    watchdog.set_defaults(func=_cmd_watchdog)
