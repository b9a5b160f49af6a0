"""The transactions BLOCKCHAIN_INCONSISTENCY reports name, as the chain has them: fetched on
the driver over JSON-RPC (eth_getTransactionReceipt, the standard library's HTTP client),
decoded by xnode.core.chain_logs, shipped to the workers with the registry keys. Only the
payload contracts' logs count (their addresses from the contracts file a node uses)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from google.protobuf.message import DecodeError
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.inputs import InputError
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.chain_evidence import ChainFacts, TxOutcome, transactions_named
from xnode.core.chain_logs import receipt_outcome
from xnode.core.misbehavior import BLOCKCHAIN_INCONSISTENCY

TIMEOUT_S = 30.0


def payload_contracts(contracts_file: str | Path) -> frozenset[str]:
    """Lower-case 0x addresses of GroupMessages and IdentityUpdates."""
    try:
        data = json.loads(Path(contracts_file).read_text())
        return frozenset(str(data[n]).lower() for n in ("group_messages", "identity_updates"))
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"cannot read the contracts file {contracts_file}: {exc}") from None


def named_transactions(reports: DataFrame) -> list[bytes]:
    """Transaction hashes named by the exported BLOCKCHAIN_INCONSISTENCY reports (the
    export's type column only picks what to look up: every report is verified anyway)."""
    rows = reports.where(F.col("type") == BLOCKCHAIN_INCONSISTENCY).select("report").collect()
    hashes: dict[bytes, None] = {}
    for row in rows:
        try:
            signed = mb.MisbehaviorReport.FromString(row["report"])
            unsigned = mb.UnsignedMisbehaviorReport.FromString(signed.unsigned_misbehavior_report)
        except DecodeError:
            continue
        hashes.update(dict.fromkeys(transactions_named(unsigned.safety.envelopes)))
    return list(hashes)


def _receipt(url: str, tx: bytes) -> object:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "eth_getTransactionReceipt",
            "params": ["0x" + tx.hex()],
        }
    ).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            reply = json.loads(answer.read())
    except (OSError, ValueError, urllib.error.URLError) as exc:
        raise InputError(f"cannot read transaction 0x{tx.hex()} from {url}: {exc}") from None
    if "error" in reply:
        raise InputError(f"{url} refused eth_getTransactionReceipt: {reply['error']}")
    return reply.get("result")


def fetch_chain_facts(url: str, contracts: frozenset[str], txs: Iterable[bytes]) -> ChainFacts:
    found: dict[bytes, TxOutcome] = {}
    for tx in txs:
        receipt = _receipt(url, tx)
        outcome = receipt_outcome(receipt if isinstance(receipt, dict) else None, contracts)
        if outcome is not None:
            found[tx] = outcome
    return found
