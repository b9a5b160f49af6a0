"""`xnode gateway`: run the payer service."""

from __future__ import annotations

import argparse
import sys

import uvloop

from xnode.gateway.settings import add_gateway_flags, gateway_settings_from_args


def _cmd_gateway(args: argparse.Namespace) -> int:
    from xnode.gateway.server import run_gateway
    from xnode.server import StartupError

    try:
        settings = gateway_settings_from_args(args)
        uvloop.run(run_gateway(settings))
    except (StartupError, ValueError) as exc:
        print(f"xnode gateway: cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


def add_gateway_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("gateway", help="run the payer service clients publish through")
    add_gateway_flags(parser)
    parser.set_defaults(func=_cmd_gateway)
