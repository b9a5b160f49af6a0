"""`xnode prove` against a real node and `xnode verify-proof` offline: a proof of one envelope
verifies with only the originator's public key (or a registry file); an altered envelope, an
altered proof or another key does not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import NodeSpec, node_settings
from tests.integration.export.helpers import Item, group, publish, run_cli_async
from tests.integration.logs.helpers import FAST_CHECKPOINTS, checkpoint_at, log_api
from xnode.core.topics import TopicKind

GROUP = Item(TopicKind.GROUP_MESSAGES, group(1))


async def test_a_proof_from_a_node_verifies_offline_and_tampering_fails(
    start_node: Any, database: str, node_spec: NodeSpec, tmp_path: Path
) -> None:
    node = await start_node(**node_settings(database, node_spec, **FAST_CHECKPOINTS))
    sent = await publish(node.address, 100, [GROUP] * 21)
    public_key = "0x" + node_spec.keys[100].public_key.hex()
    async with log_api(node.address) as api:
        await checkpoint_at(api, 100, node_spec.keys[100].public_key, 21)
    held = tmp_path / "envelope.bin"
    held.write_bytes(sent[12])  # the client's own copy of sequence id 13
    proof = tmp_path / "proof.json"
    made = await run_cli_async(
        "prove", "--node", node.address, "--envelope", str(held), "--out", str(proof)
    )
    assert made.returncode == 0, made.stderr
    document = json.loads(proof.read_text())
    assert (document["originator_node_id"], document["sequence_id"]) == (100, 13)
    assert document["tree_size"] == 21

    async def verify(path: Path, *key: str) -> tuple[int, str]:
        done = await run_cli_async(
            "verify-proof", str(path), *(key or ("--public-key", public_key))
        )
        return done.returncode, done.stdout + done.stderr

    code, out = await verify(proof)
    assert code == 0 and "VALID: originator 100 published sequence id 13" in out
    code, out = await verify(proof, "--nodes-file", str(node_spec.nodes_file))
    assert code == 0, out
    other_key = "0x" + node_spec.keys[200].public_key.hex()
    assert (await verify(proof, "--public-key", other_key))[0] == 1

    def altered(name: str, change: dict[str, Any]) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps({**document, **change}))
        return path

    envelope = bytes.fromhex(document["envelope"][2:])
    flipped = envelope[:40] + bytes([envelope[40] ^ 1]) + envelope[41:]
    code, out = await verify(altered("envelope.json", {"envelope": "0x" + flipped.hex()}))
    assert code == 1 and "INVALID" in out
    another = "0x" + sent[13].hex()  # a real envelope, but not the one the path proves
    code, out = await verify(altered("other.json", {"envelope": another, "sequence_id": 14}))
    assert code == 1 and "inclusion" in out
    path = list(document["proof"])
    path[0] = "0x" + bytes(32).hex()
    code, out = await verify(altered("path.json", {"proof": path}))
    assert code == 1 and "inclusion" in out
    assert (await verify(altered("bad.json", {"version": 9})))[0] == 2

    # The envelope fetched from the node by its id gives the same proof.
    fetched = tmp_path / "fetched.json"
    made = await run_cli_async(
        "prove",
        "--node",
        node.address,
        "--originator",
        "100",
        "--sequence-id",
        "13",
        "--out",
        str(fetched),
    )
    assert made.returncode == 0, made.stderr
    assert json.loads(fetched.read_text()) == document
