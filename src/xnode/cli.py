"""`xnode`: run a node, migrate its database, make keys, and talk to a node as a client."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

import uvloop

from xnode.chain.cli import add_chain_parser
from xnode.commands.cli import add_audit_parser, add_export_parsers, add_watchdog_parser
from xnode.config import add_settings_flags, settings_from_args, settings_table
from xnode.gateway.cli import add_gateway_parser
from xnode.observability.build_info import build_info


def _cmd_run(args: argparse.Namespace) -> int:
    from xnode.server.bootstrap import StartupError
    from xnode.server.wiring import run
    from xnode.store.identity import WrongNodeError

    settings = settings_from_args(args)
    try:
        if settings.worker_count() > 1:
            from xnode.workers import run_workers

            return run_workers(settings)
        uvloop.run(run(settings))
    except (StartupError, WrongNodeError) as exc:
        print(f"xnode: cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    from xnode.store.migrate import upgrade_to_head

    settings = settings_from_args(args)
    upgrade_to_head(settings.database_dsn, settings.migrations_dir)
    print("database is at the latest schema")
    return 0


def _cmd_keygen(args: argparse.Namespace) -> int:
    from xnode.config import write_private
    from xnode.core.crypto import SigningKey

    key = SigningKey.generate()
    if args.out:
        path = Path(args.out)
        write_private(path, key.hex() + "\n")
        print(f"wrote private key to {path}")
    else:
        print(f"private_key=0x{key.hex()}")
    print(f"public_key=0x{key.public_key.hex()}")
    print(f"address=0x{key.address.hex()}")
    return 0


def _cmd_health(args: argparse.Namespace) -> int:
    from xnode.commands.health import check
    from xnode.tls import TlsConfigError

    try:
        answer = check(settings_from_args(args), Path(args.ca_file) if args.ca_file else None)
    except TlsConfigError as exc:
        print(f"xnode health: {exc}", file=sys.stderr)
        return 2
    print(answer.said)
    return 0 if answer.serving else 1


def _cmd_settings(_args: argparse.Namespace) -> int:
    print(settings_table())
    return 0


def _cmd_client(args: argparse.Namespace) -> int:
    from xnode.client_cli import run_client_command

    return asyncio.run(run_client_command(args))


def _cmd_prove(args: argparse.Namespace) -> int:
    from xnode.client_cli import run_prove

    return run_prove(args)


def _cmd_verify_proof(args: argparse.Namespace) -> int:
    from xnode.client_cli import run_verify_proof

    return run_verify_proof(args)


def _cmd_devnet(args: argparse.Namespace) -> int:
    from xnode.devtools.devnet import run_devnet

    return run_devnet(args)


def _client_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--node",
        help="prefer this node: host:port (plaintext) or https://host:port (TLS); alone "
        "(no --registry) the client reads and writes it only, signatures unchecked",
    )
    common.add_argument(
        "--registry",
        help="node registry to check signatures against and fail over in: nodes.json or "
        "devnet.json (default .xnode/devnet.json when --node is not given)",
    )
    common.add_argument("--deadline", type=float, default=10.0, help="seconds to keep trying")
    common.add_argument("--ca-file", help="PEM CA the https:// node is checked against")
    common.add_argument("--cert-file", help="PEM client certificate, if the node asks for one")
    common.add_argument("--key-file", help="PEM private key of --cert-file")
    common.add_argument("--json", action="store_true", help="print one JSON object per line")
    publish = sub.add_parser("publish", parents=[common], help="publish group messages")
    publish.add_argument("--group-id", required=True, help="MLS group id, hex (16 bytes)")
    publish.add_argument("--message", default="hello", help="payload text")
    publish.add_argument("--count", type=int, default=1)
    publish.add_argument("--node-id", type=int, help="the --node's id (without --registry)")
    publish.add_argument("--payer-key", help="payer private key hex (default: a new one)")
    query = sub.add_parser("query", parents=[common], help="query envelopes")
    subscribe = sub.add_parser("subscribe", parents=[common], help="stream envelopes")
    for p in (query, subscribe):
        p.add_argument("--topic", action="append", default=[], help="topic, hex (repeatable)")
        p.add_argument("--group-id", action="append", default=[], help="group id, hex")
        p.add_argument("--originator", action="append", type=int, default=[])
        p.add_argument("--cursor", default="", help="node:seq,node:seq")
    query.add_argument("--limit", type=int, default=100)
    query.add_argument(
        "--prove",
        action="store_true",
        help="read through CompletenessApi: each originator's envelopes proven complete after"
        " the cursor (docs/proofs.md); omissions are reported and read from another node",
    )
    subscribe.add_argument("--max", type=int, default=0, help="stop after N envelopes")
    for p in (publish, query, subscribe):
        p.set_defaults(func=_cmd_client, command=p.prog.split()[-1])
    prove = sub.add_parser(
        "prove",
        parents=[common],
        help="write a proof that an envelope's originator published it (docs/proofs.md)",
    )
    prove.add_argument("--envelope", help="the signed OriginatorEnvelope you hold (binary or hex)")
    prove.add_argument("--originator", type=int, help="or: the envelope's originator id ...")
    prove.add_argument("--sequence-id", type=int, help="... and sequence id, fetched from --node")
    prove.add_argument("--out", required=True, help="where to write the proof (JSON)")
    prove.set_defaults(func=_cmd_prove)
    verify = sub.add_parser(
        "verify-proof", help="check a proof file offline (exit 0 valid, 1 invalid, 2 unusable)"
    )
    verify.add_argument("file", help="a proof file written by `xnode prove`")
    key = verify.add_mutually_exclusive_group(required=True)
    key.add_argument("--public-key", help="the originator's registry public key, hex")
    key.add_argument("--nodes-file", help="a registry file (nodes.json) naming the originator")
    verify.set_defaults(func=_cmd_verify_proof)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xnode", description=__doc__)
    parser.add_argument(
        "--version",
        action="version",
        version=build_info().line(),
        help="print the version and the git commit this xnode was built from, and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a node")
    add_settings_flags(run)
    run.set_defaults(func=_cmd_run)
    migrate = sub.add_parser("migrate", help="apply database migrations")
    add_settings_flags(migrate)
    migrate.set_defaults(func=_cmd_migrate)
    keygen = sub.add_parser("keygen", help="make a secp256k1 signer key")
    keygen.add_argument("--out", help="write the private key to this file")
    keygen.set_defaults(func=_cmd_keygen)
    health = sub.add_parser(
        "health",
        help="ask the node this host runs (its own settings) whether it serves: exit 0 SERVING, "
        "1 not serving or unreachable, 2 unusable TLS files",
    )
    add_settings_flags(health)
    health.add_argument(
        "--ca-file", help="PEM CA the node's certificate chains to (default: tls_peer_ca_file)"
    )
    health.set_defaults(func=_cmd_health)
    settings = sub.add_parser("settings", help="print the settings table")
    settings.set_defaults(func=_cmd_settings)
    devnet = sub.add_parser("devnet", help="run a local network (Postgres, anvil, nodes)")
    devnet.add_argument("--nodes", type=int, default=3)
    devnet.add_argument(
        "--registry",
        choices=["chain", "file"],
        default="chain",
        help="nodes read the registry from the NodeRegistry contract, or from nodes.json",
    )
    devnet.add_argument("--dir", default=".xnode", help="state directory")
    devnet.add_argument("--base-port", type=int, default=5050)
    devnet.add_argument(
        "--tls",
        action="store_true",
        help="TLS between nodes and for clients: a throwaway CA in <dir>/tls, https:// addresses",
    )
    devnet.add_argument(
        "--read-only-nodes",
        type=int,
        default=0,
        help="also run this many read-only nodes (unregistered; they replicate, serve, and "
        "refuse publishes)",
    )
    devnet.add_argument(
        "--two-chains",
        action="store_true",
        help="the NodeRegistry on a second anvil (chain id 31338), apart from the app chain "
        "of the payload contracts",
    )
    devnet.add_argument(
        "--ha",
        action="store_true",
        help="node 100's database on Patroni and etcd: a primary and a synchronous standby "
        "it follows across failovers (docs/ha.md)",
    )
    devnet.add_argument(
        "--no-restart",
        dest="restart",
        action="store_false",
        help="leave a node or the gateway that exits down; by default it is started again "
        "after a backoff (at most 1 s, doubling up to 30 s while it keeps failing, 1 s again "
        "once it stayed up 30 s) and the others keep serving meanwhile",
    )
    devnet.set_defaults(func=_cmd_devnet)
    add_chain_parser(sub)
    add_export_parsers(sub)
    add_audit_parser(sub)
    add_watchdog_parser(sub)
    add_gateway_parser(sub)
    _client_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
