"""What checking the new report kinds costs (XIP-49 3.2.7): a CAUSAL_ORDERING proof, a
BLOCKCHAIN_INCONSISTENCY proof against a looked-up transaction, and the watchdog's look at
an honest envelope it sees for the first time (parsed; no signature recovered unless it
looks like a proof).

    .venv/bin/python bench/bench_evidence.py [--seconds 1.0]"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Callable

from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import group_message_envelope
from xnode.core import misbehavior
from xnode.core.chain_evidence import TxOutcome
from xnode.core.chain_payloads import ChainEvent, build_chain_payload
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.evidence import why_unproven
from xnode.core.watchdog import EnvelopeWitness

KEY, PAYER = SigningKey.generate(), SigningKey.generate()
KEYS = {100: [KEY.public_key]}
GROUP = bytes(range(16))
TX = bytes([7]) * 32


def envelope(seq: int, depends_on: dict[int, int]) -> bytes:
    client = group_message_envelope(GROUP, b"m" * 200, Cursor(depends_on))
    payer = validate_payer_envelope(build_payer_envelope(client, PAYER, 100), 100)
    return originate(payer, 100, seq, time.time_ns(), KEY).raw


def per_call_us(fn: Callable[[], object], seconds: float) -> float:
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        fn()
        calls += 1
    return (time.perf_counter() - started) / calls * 1e6


def chain_report() -> tuple[mb.UnsignedMisbehaviorReport, dict[bytes, TxOutcome]]:
    payload = group_message_envelope(GROUP, b"on chain").SerializeToString()
    event = ChainEvent(0, 1, GROUP, payload, 1, bytes(32), TX, 0)
    doctored = dataclasses.replace(
        event, payload=group_message_envelope(GROUP, b"x").SerializeToString()
    )
    raw = build_chain_payload(doctored, 1, KEY).raw
    report = misbehavior.safety_report(misbehavior.BLOCKCHAIN_INCONSISTENCY, 100, [raw], 1)
    return report, {TX: TxOutcome(True, (event,))}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    args = parser.parse_args()
    causal = misbehavior.safety_report(misbehavior.CAUSAL_ORDERING, 100, [envelope(4, {100: 4})], 1)
    chain, facts = chain_report()
    honest = [envelope(i, {100: i - 1}) for i in range(1, 5001)]

    def first_sightings() -> None:
        witness = EnvelopeWitness(KEYS)
        for raw in honest:
            witness.offer(raw, 1)

    assert why_unproven(causal, KEYS) is None and why_unproven(chain, KEYS, facts) is None
    print(f"load average {os.getloadavg()[0]:.2f}")
    causal_us = per_call_us(lambda: why_unproven(causal, KEYS), args.seconds)
    print(f"CAUSAL_ORDERING proof checked: {causal_us:.1f} us")
    chain_us = per_call_us(lambda: why_unproven(chain, KEYS, facts), args.seconds)
    print(f"BLOCKCHAIN_INCONSISTENCY proof checked: {chain_us:.1f} us")
    witness_us = per_call_us(first_sightings, args.seconds) / len(honest)
    print(f"watchdog, honest envelope seen first: {witness_us:.1f} us")


if __name__ == "__main__":
    main()
