"""`xnode gateway`: run the payer service."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import uvloop

from xnode.gateway.settings import (
    GatewaySettings,
    add_gateway_flags,
    gateway_settings_from_args,
)


def _cmd_gateway(args: argparse.Namespace) -> int:
    from xnode.gateway.server import run_gateway
    from xnode.server.bootstrap import StartupError

    try:
        settings = gateway_settings_from_args(args)
        uvloop.run(run_gateway(settings))
    except (StartupError, ValueError) as exc:
        print(f"xnode gateway: cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


def _cmd_usage(args: argparse.Namespace) -> int:
    from xnode.gateway.usage import UsageLog, usage_table

    path: Path | None = args.usage_path or GatewaySettings().usage_file
    if path is None:
        print("xnode gateway usage: set --usage-file or XNODE_GATEWAY_USAGE_FILE", file=sys.stderr)
        return 2
    if not path.exists():
        print(f"xnode gateway usage: no usage file {path}", file=sys.stderr)
        return 2
    log = UsageLog(path)
    try:
        rows = log.rows()
    finally:
        log.close()
    if args.json:
        print(json.dumps([{**asdict(u), "fees": u.fees} for u in rows], indent=2))
    else:
        print(usage_table(rows))
    return 0


def add_gateway_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("gateway", help="run the payer service clients publish through")
    add_gateway_flags(parser)
    parser.set_defaults(func=_cmd_gateway)
    commands = parser.add_subparsers(dest="gateway_command", metavar="{usage}")
    usage = commands.add_parser(
        "usage", help="what the gateway paid for, per client and day (its usage_file)"
    )
    usage.add_argument(
        "--usage-file",
        dest="usage_path",
        type=Path,
        help="the gateway's usage_file (default: its setting, XNODE_GATEWAY_USAGE_FILE)",
    )
    usage.add_argument("--json", action="store_true", help="JSON instead of a table")
    usage.set_defaults(func=_cmd_usage)
