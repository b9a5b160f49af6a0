"""What peers say about this node's own log at start-up, and what is logged (the wire part
runs in tests/e2e/ops/test_restore.py)."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from xnode.core.registry import NodeEntry
from xnode.replication.recovery import RecoveryFailed, recover_own_log

KEY = b"\x04" + bytes(64)
PEERS = [NodeEntry(n, KEY, f"http://127.0.0.1:{n}") for n in (200, 300, 400)]


def answers(held: dict[int, int | Exception]):  # type: ignore[no-untyped-def]
    async def fetch(peer: NodeEntry) -> int:
        answer = held[peer.node_id]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return fetch


async def test_the_highest_id_any_peer_holds_is_where_sequencing_resumes() -> None:
    fetch = answers({200: 20, 300: 15, 400: RecoveryFailed("UNAVAILABLE: refused")})
    with capture_logs() as logs:
        outcome = await recover_own_log(10, PEERS, fetch)
    assert outcome.held == {200: 20, 300: 15}
    assert outcome.failed == {400: "UNAVAILABLE: refused"}
    assert (outcome.peer_top, outcome.behind) == (20, True)
    [event] = logs
    assert (event["event"], event["log_level"]) == ("own_log_recovered", "warning")
    assert (event["local_top"], event["peer_top"]) == (10, 20)


async def test_peers_holding_nothing_newer_leave_the_sequencer_alone() -> None:
    with capture_logs() as logs:
        outcome = await recover_own_log(10, PEERS, answers({200: 10, 300: 0, 400: 9}))
    assert not outcome.behind
    assert [e["event"] for e in logs] == ["own_log_checked"]


async def test_no_peer_answering_starts_with_a_loud_warning() -> None:
    failed = RecoveryFailed("no answer in time")
    with capture_logs() as logs:
        outcome = await recover_own_log(10, PEERS, answers(dict.fromkeys((200, 300, 400), failed)))
    assert not outcome.behind and outcome.held == {}
    [event] = logs
    assert (event["event"], event["log_level"]) == ("own_log_unverified", "warning")
    assert sorted(event["failed"]) == [200, 300, 400]


async def test_a_network_of_one_has_nobody_to_ask() -> None:
    with capture_logs() as logs:
        outcome = await recover_own_log(0, [], answers({}))
    assert outcome.asked == () and not outcome.behind
    assert [e["event"] for e in logs] == ["own_log_check_skipped"]


async def test_a_failure_that_is_not_the_peers_propagates() -> None:
    with pytest.raises(OSError):  # e.g. the local store failed while storing what came back
        await recover_own_log(10, PEERS[:1], answers({200: OSError("disk full")}))
