"""Every runnable shell block of the README and docs/ runs as written: ```sh blocks from a
scratch directory laid out like the checkout, ```sh devnet blocks against one shared
`xnode devnet` (3 nodes, the gateway, anvil) whose state is that directory's `.xnode`.

Documentation that stops being true fails here. The devnet's ports are the documented ones
when they are free; when another process holds one, the block is run with the port the
devnet took instead (read from its devnet.json).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.replication.test_devnet import interrupt, start_devnet
from tests.support.docs_blocks import ROOT, Block, all_blocks
from xnode.devtools.devgateway import GATEWAY_HTTP_PORT, GATEWAY_PORT
from xnode.devtools.devnet import ANVIL_PORT, DEVNET_FEES, HTTP_PORT, METRICS_PORT

BLOCKS = all_blocks()
BLOCK_TIMEOUT_S = 120
DEVNET_NODES = 3
DOCUMENTED_PORT = 5050


@dataclass
class Scratch:
    directory: Path
    ports: dict[str, str]  # documented host:port -> the devnet's

    def run(self, block: Block) -> subprocess.CompletedProcess[str]:
        text = block.text
        for documented, actual in self.ports.items():
            text = text.replace(documented, actual)
        venv_bin = str(Path(sys.executable).parent)
        env = {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}"}
        return subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", text],
            cwd=self.directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )


def _lay_out(directory: Path) -> Path:
    """A directory that reads like the checkout (every top-level entry linked) but keeps what
    the blocks write (keys, exports, proofs) to itself."""
    directory.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in {".git", ".xnode"}:
            (directory / entry.name).symlink_to(entry)
    return directory


def _port_map(described: dict[str, Any]) -> dict[str, str]:
    documented: dict[str, str] = {}
    for i, node in enumerate(described["nodes"]):
        documented[f"{DOCUMENTED_PORT + i}"] = node["address"].rsplit(":", 1)[1]
        documented[f"{HTTP_PORT + i}"] = node["http"].rsplit(":", 1)[1]
        documented[f"{METRICS_PORT + i}"] = node["metrics"].rsplit(":", 1)[1]
    gateway = described["gateway"]
    documented[f"{GATEWAY_PORT}"] = gateway["address"].rsplit(":", 1)[1]
    documented[f"{GATEWAY_HTTP_PORT}"] = gateway["http"].rsplit(":", 1)[1]
    documented[f"{ANVIL_PORT}"] = str(described["chain"]["rpc_url"]).rsplit(":", 1)[1]
    return {
        f"{host}:{port}": f"{host}:{actual}"
        for port, actual in documented.items()
        if port != actual
        for host in ("127.0.0.1", "localhost")
    }


@pytest.fixture(scope="module")
def devnet_scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scratch]:
    directory = _lay_out(tmp_path_factory.mktemp("docs") / "checkout")
    proc, described = start_devnet(
        directory / ".xnode", DOCUMENTED_PORT, "--nodes", str(DEVNET_NODES)
    )
    try:
        yield Scratch(directory, _port_map(described))
    finally:
        assert interrupt(proc) == 0, (directory / "devnet.out").read_text()[-3000:]


@pytest.fixture
def scratch(tmp_path: Path) -> Scratch:
    return Scratch(_lay_out(tmp_path / "checkout"), {})


def _explain(block: Block, done: subprocess.CompletedProcess[str]) -> str:
    return (
        f"{block.name} exited {done.returncode}\n--- block\n{block.text}"
        f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mode == "run"], ids=lambda b: b.name)
def test_block_runs(block: Block, scratch: Scratch) -> None:
    done = scratch.run(block)
    assert done.returncode == 0, _explain(block, done)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mode == "devnet"], ids=lambda b: b.name)
def test_block_runs_against_the_devnet(block: Block, devnet_scratch: Scratch) -> None:
    done = devnet_scratch.run(block)
    assert done.returncode == 0, _explain(block, done)


def test_a_failing_command_fails_its_block(scratch: Scratch) -> None:
    broken = Block(ROOT / "README.md", 0, "run", "", "xnode keygen --out k.key\nfalse\necho no\n")
    done = scratch.run(broken)
    assert done.returncode != 0 and "no" not in done.stdout


def test_the_devnet_charges_its_fee_schedule(devnet_scratch: Scratch) -> None:
    described = json.loads((devnet_scratch.directory / ".xnode" / "devnet.json").read_text())
    assert described["fees"] == asdict(DEVNET_FEES)
    group = "fee5" * 8
    publish = Block(ROOT / "README.md", 0, "devnet", "", f"xnode publish --group-id {group}\n")
    assert devnet_scratch.run(publish).returncode == 0
    query = Block(ROOT / "README.md", 0, "devnet", "", f"xnode query --json --group-id {group}\n")
    done = devnet_scratch.run(query)
    assert done.returncode == 0, done.stderr
    [envelope] = [json.loads(line) for line in done.stdout.splitlines()]
    assert envelope["base_fee_picodollars"] > DEVNET_FEES.envelope_picodollars > 0
