"""The client commands of the CLI: publish, query and subscribe through xnode.client (the
checks of XIP-49 3.3.4, causal order, failover), printing what comes back."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import grpc

from xnode.client.network import NetworkClient, NoNodeAvailable
from xnode.client.node import NodeClient
from xnode.client.proven import ProvenReader
from xnode.client.registry_file import RegistryFileError, load_registry
from xnode.core.checkpoints import has_log
from xnode.core.client_checks import CheckedEnvelope, EnvelopeCheckFailed
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.errors import Rejected
from xnode.core.publication import (
    ProofInvalid,
    PublicationProof,
    build_proof,
    verify_publication,
)
from xnode.core.registry import NodeEntry, Registry
from xnode.core.topics import Topic, TopicKind
from xnode.tls import ClientTls, TlsConfigError, target_of
from xnode_api.logs.v1 import logs_pb2, logs_pb2_grpc

DEFAULT_NODE = "127.0.0.1:5050"  # `xnode prove` without --node
# A node pinned by address alone has no known key: its entry needs a well-formed one.
_UNKNOWN_KEY = b"\x04" + bytes(64)


def _parse_cursor(text: str) -> Cursor:
    pairs = (item.split(":") for item in text.split(",") if item)
    return Cursor({int(n): int(s) for n, s in pairs})


def describe(envelope: CheckedEnvelope) -> dict[str, object]:
    parsed = parse_originator_envelope(envelope.raw)
    signer = parsed.signer_public_key() if parsed.signature else None
    return {
        "originator": parsed.originator_node_id,
        "sequence_id": parsed.sequence_id,
        "originator_ns": parsed.originator_ns,
        "topic": parsed.topic().hex(),
        "expiry_unixtime": parsed.expiry,
        "signer": "0x" + signer.hex() if signer else None,
        "bytes": len(parsed.raw),
        "base_fee_picodollars": parsed.fees.base,
        "congestion_fee_picodollars": parsed.fees.congestion,
    }


def _print(envelope: CheckedEnvelope, as_json: bool) -> None:
    info = describe(envelope)
    if as_json:
        print(json.dumps(info), flush=True)
    else:
        print(
            f"{info['originator']}:{info['sequence_id']} topic={info['topic']} "
            f"ns={info['originator_ns']} bytes={info['bytes']} "
            f"fees={info['base_fee_picodollars']}+{info['congestion_fee_picodollars']}pd",
            flush=True,
        )


def _topics(args: argparse.Namespace) -> list[bytes]:
    group_topics = [Topic(TopicKind.GROUP_MESSAGES, bytes.fromhex(g)).raw for g in args.group_id]
    return [bytes.fromhex(t) for t in args.topic] + group_topics


def _hint(address: str | None, code: grpc.StatusCode) -> str:
    if code is grpc.StatusCode.UNAVAILABLE and address and not target_of(address)[1]:
        return " (if the node serves TLS: --node https://HOST:PORT --ca-file CA.pem)"
    return ""


def _registry(args: argparse.Namespace) -> tuple[Registry, bool]:
    """The registry to check against, and whether its keys are known. `--node` alone pins
    one node by address: its key is unknown, so signatures go unchecked (said on stderr)."""
    if args.registry is None and args.node:
        node_id = getattr(args, "node_id", None)
        if args.command == "publish" and node_id is None:
            raise RegistryFileError("publish with --node needs --node-id (or use --registry)")
        print(
            "xnode: no --registry: originator signatures are not checked against registry keys",
            file=sys.stderr,
        )
        return Registry([NodeEntry(node_id or 0, _UNKNOWN_KEY, args.node)]), False
    path = args.registry or ".xnode/devnet.json"
    registry = load_registry(path)
    if args.node:  # the chosen node, as the registry has it (a non-binding preference, 3.3.6)
        chosen = [n for n in registry.nodes.values() if n.http_address == args.node]
        registry = Registry(chosen) if chosen else registry
    return registry, True


async def _run(client: NetworkClient, args: argparse.Namespace) -> None:
    if args.command == "publish":
        payloads = [f"{args.message} {i}".encode() for i in range(args.count)]
        for envelope in await client.publish_group_messages(bytes.fromhex(args.group_id), payloads):
            _print(envelope, args.json)
    elif args.command == "query" and args.prove:
        await _query_proven(client, args)
    elif args.command == "query":
        found = await client.query(
            _topics(args), args.originator, _parse_cursor(args.cursor), args.limit
        )
        for envelope in found:
            _print(envelope, args.json)
    else:
        subscription = client.subscribe(_topics(args), args.originator, _parse_cursor(args.cursor))
        seen = 0
        async for envelope in subscription:
            _print(envelope, args.json)
            seen += 1
            if args.max and seen >= args.max:
                subscription.close()
                break


async def _query_proven(client: NetworkClient, args: argparse.Namespace) -> None:
    """`query --prove`: each topic of each originator (all the registry's logs unless
    --originator) proven complete after the cursor; omissions reported, reads completed
    from the next node."""
    reader = ProvenReader(client)
    originators = args.originator or [n for n in sorted(client.registry.nodes) if has_log(n)]
    reads = await reader.read(_topics(args), originators, _parse_cursor(args.cursor))
    for omission in reader.omissions:
        filed = "reported" if omission.reported else "not reported"
        print(
            f"xnode: node {omission.node_id} omission ({filed}): {omission.problem}",
            file=sys.stderr,
        )
    for read in reads:
        for envelope in read.envelopes:
            _print(envelope, args.json)
        print(
            f"xnode: complete: topic {read.topic.hex()} of originator {read.originator} through"
            f" sequence id {read.through}, proven by node {read.node_id}"
            + (f"; expired: {read.expired}" if read.expired else ""),
            file=sys.stderr,
        )


def _failure(exc: BaseException, node: str | None) -> str:
    cause = exc.__cause__ if isinstance(exc, NoNodeAvailable) and exc.__cause__ else exc
    if isinstance(cause, grpc.aio.AioRpcError):
        return f"{cause.code().name}: {cause.details()}{_hint(node, cause.code())}"
    return f"{type(cause).__name__}: {cause}"


async def run_client_command(args: argparse.Namespace) -> int:
    try:
        tls = ClientTls.from_files(args.ca_file, args.cert_file, args.key_file)
        registry, known = _registry(args)
    except (TlsConfigError, RegistryFileError) as exc:
        print(f"xnode: {exc}", file=sys.stderr)
        return 2
    payer_key = getattr(args, "payer_key", None)
    payer = SigningKey.from_hex(payer_key) if payer_key else SigningKey.generate()
    async with NetworkClient(
        registry, payer, tls, deadline_s=args.deadline, check_signatures=known
    ) as client:
        try:
            await _run(client, args)
        except (grpc.aio.AioRpcError, NoNodeAvailable, EnvelopeCheckFailed, ValueError) as exc:
            print(f"xnode: {_failure(exc, args.node)}", file=sys.stderr)
            return 1
        finally:
            for refusal in client.refusals:
                print(f"xnode: refused node {refusal.node_id}: {refusal.check}", file=sys.stderr)
    return 0


def _read_envelope(path: str) -> bytes:
    """The client's own copy of the envelope, binary or hex."""
    data = Path(path).read_bytes()
    try:
        return bytes.fromhex(data.decode().strip().removeprefix("0x"))
    except (UnicodeDecodeError, ValueError):
        return data


async def _served_envelope(client: NodeClient, originator: int, sequence_id: int) -> bytes:
    cursor = Cursor({originator: sequence_id - 1})
    found = await client.query(originators=[originator], cursor=cursor, limit=1)
    raw = found[0].SerializeToString() if found else b""
    if not raw or parse_originator_envelope(raw).sequence_id != sequence_id:
        raise LookupError(f"the node holds no envelope {originator}:{sequence_id}")
    return raw


async def _fetch_proof(args: argparse.Namespace, held: bytes | None) -> PublicationProof:
    tls = ClientTls.from_files(args.ca_file, args.cert_file, args.key_file)
    async with NodeClient(args.node or DEFAULT_NODE, tls) as client:
        envelope = held or await _served_envelope(client, args.originator, args.sequence_id)
        parsed = parse_originator_envelope(envelope)
        stub = logs_pb2_grpc.LogApiStub(client.channel)
        answer = await stub.GetInclusionProof(
            logs_pb2.GetInclusionProofRequest(
                originator_node_id=parsed.originator_node_id, sequence_id=parsed.sequence_id
            )
        )
    return build_proof(envelope, answer.checkpoint.SerializeToString(), answer.proof)


def run_prove(args: argparse.Namespace) -> int:
    """`xnode prove`: asks a node for the inclusion proof of one envelope in its originator's
    newest checkpoint and writes the proof file (xnode.core.publication, docs/proofs.md)."""
    if not args.envelope and (args.originator is None or args.sequence_id is None):
        print("xnode prove: give --envelope, or --originator and --sequence-id", file=sys.stderr)
        return 2
    try:
        held = _read_envelope(args.envelope) if args.envelope else None
        proof = asyncio.run(_fetch_proof(args, held))
        Path(args.out).write_text(proof.to_json() + "\n")
    except (TlsConfigError, LookupError, OSError, Rejected, ProofInvalid) as exc:
        print(f"xnode prove: {exc}", file=sys.stderr)
        return 2
    except grpc.aio.AioRpcError as exc:
        print(f"xnode prove: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    print(
        f"wrote the proof of {proof.originator_node_id}:{proof.sequence_id} (checkpoint at "
        f"tree size {proof.tree_size}) to {args.out}"
    )
    return 0


def run_verify_proof(args: argparse.Namespace) -> int:
    """`xnode verify-proof FILE`: offline; 0 valid, 1 invalid, 2 unusable input."""
    try:
        proof = PublicationProof.from_json(Path(args.file).read_text())
        if args.public_key:
            key = bytes.fromhex(args.public_key.removeprefix("0x"))
        else:
            entry = Registry.from_json(Path(args.nodes_file).read_text()).get(
                proof.originator_node_id
            )
            if entry is None:
                raise LookupError(f"node {proof.originator_node_id} is not in {args.nodes_file}")
            key = entry.public_key
    except (OSError, ValueError, LookupError) as exc:
        print(f"xnode verify-proof: cannot check: {exc}", file=sys.stderr)
        return 2
    try:
        checkpoint = verify_publication(proof, key)
    except ProofInvalid as exc:
        print(f"INVALID: {exc}")
        return 1
    print(
        f"VALID: originator {proof.originator_node_id} published sequence id "
        f"{proof.sequence_id} (committed by its checkpoint at tree size {checkpoint.tree_size}, "
        f"root 0x{checkpoint.root.hex()})"
    )
    return 0
