"""The byzantine harness's withholding run on one real node: node 500, the scripted
withholder (xnode.devtools.byzantine), commits to its log in a signed checkpoint, never
serves one committed envelope and signs holdings that leave it out. Node 100 replicates
from it, repairs 500's log from 500 itself and files a WITHHOLDING report against node 500
that proves itself offline, from the report and the registry keys alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.replication.test_withholding import (
    beside_withholder,
    filed,
    proves_withholding,
)
from xnode.core.misbehavior import WITHHOLDING
from xnode.devtools.byzantine import peer


async def test_a_withholding_originator_is_reported_with_a_proof(
    start_node: Any, database: str, tmp_path: Path
) -> None:
    async with beside_withholder(start_node, database, tmp_path, peer.withholding) as (
        node,
        log,
        spec,
    ):
        found = await filed(node.address, WITHHOLDING)
    proves_withholding(found, log, spec)
