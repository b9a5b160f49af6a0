"""The client commands of the CLI: publish, query and subscribe, printing what comes back."""

from __future__ import annotations

import argparse
import json
import sys

import grpc

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.api.client import NodeClient, envelopes_of
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.topics import Topic, TopicKind
from xnode.tls import ClientTls, TlsConfigError, target_of


def _parse_cursor(text: str) -> Cursor:
    pairs = (item.split(":") for item in text.split(",") if item)
    return Cursor({int(n): int(s) for n, s in pairs})


def describe(envelope: envelopes_pb2.OriginatorEnvelope) -> dict[str, object]:
    parsed = parse_originator_envelope(envelope.SerializeToString())
    signer = parsed.signer_public_key() if parsed.signature else None
    return {
        "originator": parsed.originator_node_id,
        "sequence_id": parsed.sequence_id,
        "originator_ns": parsed.originator_ns,
        "topic": parsed.topic().hex(),
        "expiry_unixtime": parsed.expiry,
        "signer": "0x" + signer.hex() if signer else None,
        "bytes": len(parsed.raw),
    }


def _print(envelope: envelopes_pb2.OriginatorEnvelope, as_json: bool) -> None:
    info = describe(envelope)
    if as_json:
        print(json.dumps(info), flush=True)
    else:
        print(
            f"{info['originator']}:{info['sequence_id']} topic={info['topic']} "
            f"ns={info['originator_ns']} bytes={info['bytes']}",
            flush=True,
        )


def _topics(args: argparse.Namespace) -> list[bytes]:
    group_topics = [Topic(TopicKind.GROUP_MESSAGES, bytes.fromhex(g)).raw for g in args.group_id]
    return [bytes.fromhex(t) for t in args.topic] + group_topics


def _hint(address: str, code: grpc.StatusCode) -> str:
    if code is grpc.StatusCode.UNAVAILABLE and not target_of(address)[1]:
        return " (if the node serves TLS: --node https://HOST:PORT --ca-file CA.pem)"
    return ""


async def run_client_command(args: argparse.Namespace) -> int:
    try:
        tls = ClientTls.from_files(args.ca_file, args.cert_file, args.key_file)
    except TlsConfigError as exc:
        print(f"xnode: {exc}", file=sys.stderr)
        return 2
    try:
        async with NodeClient(args.node, tls) as client:
            if args.command == "publish":
                payer = (
                    SigningKey.from_hex(args.payer_key) if args.payer_key else SigningKey.generate()
                )
                payloads = [f"{args.message} {i}".encode() for i in range(args.count)]
                sent = await client.publish_group_messages(
                    payer, args.node_id, bytes.fromhex(args.group_id), payloads
                )
                for envelope in sent:
                    _print(envelope, args.json)
            elif args.command == "query":
                found = await client.query(
                    _topics(args), args.originator, _parse_cursor(args.cursor), args.limit
                )
                for envelope in found:
                    _print(envelope, args.json)
            else:
                call = client.subscribe(_topics(args), args.originator, _parse_cursor(args.cursor))
                seen = 0
                async for envelope in envelopes_of(call):
                    _print(envelope, args.json)
                    seen += 1
                    if args.max and seen >= args.max:
                        call.cancel()
                        break
    except grpc.aio.AioRpcError as exc:
        hint = _hint(args.node, exc.code())
        print(f"xnode: {exc.code().name}: {exc.details()}{hint}", file=sys.stderr)
        return 1
    return 0
