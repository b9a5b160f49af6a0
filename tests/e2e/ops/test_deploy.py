"""docs/deploy.md followed on this machine: its SQL makes a role that is not a superuser and
its database, `xnode keygen` the key, its nodes file format the registry,
deploy/xnode.env.example (values filled in, ports and paths only changed) the settings, the
commands of deploy/xnode.service start the node (migrations as that role), and the page's
smoke checks pass against it over TLS. The unit passes `systemd-analyze verify`."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.docs_blocks import ROOT, Block, blocks_of
from tests.support.failure_logs import print_logs_if_failed
from xnode.core.registry import Registry
from xnode.devtools.certs import CertAuthority
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import PgCluster, free_port
from xnode.tls import ClientTls

DEPLOY = ROOT / "docs" / "deploy.md"
UNIT = ROOT / "deploy" / "xnode.service"
ENV_EXAMPLE = ROOT / "deploy" / "xnode.env.example"
INSTALLED = "/opt/xnode/bin/"  # where the unit and the page have xnode installed
VENV_BIN = str(Path(sys.executable).parent) + "/"


def fenced(language: str) -> list[str]:
    """The bodies of docs/deploy.md's ```<language> blocks."""
    found = re.findall(rf"^```{language}\n(.*?)^```$", DEPLOY.read_text(), re.M | re.S)
    assert found, f"docs/deploy.md has no ```{language} block"
    return found


def smoke_block() -> Block:
    [block] = [b for b in blocks_of(DEPLOY) if "test_deploy.py runs it" in b.reason]
    return block


def unit_commands() -> list[list[str]]:
    """ExecStartPre= and ExecStart= of the unit, in order, as the venv's xnode."""
    lines = UNIT.read_text().splitlines()
    commands = [
        line.split("=", 1)[1] for line in lines if line.startswith(("ExecStartPre=", "ExecStart="))
    ]
    assert len(commands) == 2, commands
    return [shlex.split(command.replace(INSTALLED, VENV_BIN)) for command in commands]


def env_file(values: dict[str, str]) -> str:
    """deploy/xnode.env.example with `values` set: each on the line (or the commented-out
    line) that names it, which must exist."""
    out, unset = [], dict(values)
    for line in ENV_EXAMPLE.read_text().splitlines():
        key = line.removeprefix("# ").split("=", 1)[0]
        if "=" in line and key in unset:
            line = f"{key}={unset.pop(key)}"
        out.append(line)
    assert not unset, f"deploy/xnode.env.example does not name {sorted(unset)}"
    return "\n".join(out) + "\n"


def read_env(text: str) -> dict[str, str]:
    """KEY=VALUE lines, as systemd's EnvironmentFile= reads this file."""
    pairs = (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {key: value for key, value in pairs}


def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: `apt-get install systemd` provides it")
    # verify checks that the commands exist: the venv's xnode stands for /opt/xnode's.
    unit = tmp_path / "xnode.service"
    unit.write_text(UNIT.read_text().replace(INSTALLED, VENV_BIN))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


@pytest.fixture
def xnode_role(pg_cluster: PgCluster) -> Iterator[str]:
    """The page's SQL run by the superuser, with a name of this test's for `xnode`."""
    name = f"xnode_{uuid.uuid4().hex[:8]}"
    [sql] = fenced("sql")
    psql = ["psql", pg_cluster.dsn(), "-v", "ON_ERROR_STOP=1", "-q"]
    # Read as psql reads what is pasted into it: a statement at a time.
    subprocess.run(psql, input=re.sub(r"\bxnode\b", name, sql), text=True, check=True)
    psql.append("-c")
    yield name
    subprocess.run([*psql, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], check=True)
    subprocess.run([*psql, f'DROP ROLE "{name}"'], check=True)


def test_the_checklist_brings_up_a_node_as_a_role_that_is_not_a_superuser(
    pg_cluster: PgCluster, xnode_role: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    superuser = subprocess.run(
        ["psql", pg_cluster.dsn(), "-tAc", f"SELECT rolsuper OR rolcreatedb OR rolcreaterole"
         f" FROM pg_roles WHERE rolname = '{xnode_role}'"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert superuser.stdout.strip() == "f"

    keygen = subprocess.run(
        [f"{VENV_BIN}xnode", "keygen", "--out", str(tmp_path / "node.key")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    [public_key] = re.findall(r"^public_key=(0x04[0-9a-f]{128})$", keygen.stdout, re.M)

    ca = CertAuthority.create("deploy test CA")
    (tmp_path / "ca.pem").write_bytes(ca.pem)
    (tmp_path / "tls").mkdir()  # as on the page: apart from the signer key
    cert_file, key_file = ca.issue_files(tmp_path / "tls", "node")  # localhost, 127.0.0.1
    ports = {5050: free_port(), 5150: free_port(), 9464: free_port()}
    [nodes_example] = fenced("json")
    nodes = json.loads(nodes_example)
    nodes["nodes"][0].update(public_key=public_key, http_address=f"https://localhost:{ports[5050]}")
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    assert Registry.from_json((tmp_path / "nodes.json").read_text()).get(100) is not None

    example = read_env(ENV_EXAMPLE.read_text())
    at = {key: example[key] for key in example if key.endswith("ADDRESS")}
    for documented, port in ports.items():  # the page's hosts, this machine's free ports
        at = {k: v.replace(f":{documented}", f":{port}") for k, v in at.items()}
    dsn = pg_cluster.dsn(xnode_role).replace("postgres@", f"{xnode_role}:change-me@")
    env_path = tmp_path / "xnode.env"
    env_path.write_text(
        env_file(
            {
                **at,
                "XNODE_DATABASE_DSN": dsn,
                "XNODE_SIGNER_KEY_FILE": str(tmp_path / "node.key"),
                "XNODE_NODES_FILE": str(tmp_path / "nodes.json"),
                "XNODE_TLS_CERT_FILE": str(cert_file),
                "XNODE_TLS_KEY_FILE": str(key_file),
                "XNODE_TLS_PEER_CA_FILE": str(tmp_path / "ca.pem"),
            }
        )
    )
    settings = read_env(env_path.read_text())
    # One worker: the test machine's cores are shared (the page leaves the default).
    env = {k: v for k, v in os.environ.items() if not k.startswith("XNODE_")}
    env.update(settings, XNODE_WORKERS="1")

    migrate, run = unit_commands()
    migrated = subprocess.run(migrate, env=env, capture_output=True, text=True, timeout=120)
    assert migrated.returncode == 0, migrated.stderr
    log = tmp_path / "node.log"
    node = subprocess.Popen(run, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        address = f"https://localhost:{ports[5050]}"
        assert wait_serving(address, 90, ClientTls(ca.pem), node), log.read_text()[-3000:]
        text = smoke_block().text
        local = {
            "/etc/xnode/xnode.env": str(env_path),
            "/etc/xnode/tls/ca.pem": str(tmp_path / "ca.pem"),
            INSTALLED: VENV_BIN,
            "node.example.org:5050": f"localhost:{ports[5050]}",
            "127.0.0.1:9464": f"127.0.0.1:{ports[9464]}",
        }
        for on_the_page, here in local.items():
            text = text.replace(on_the_page, here)
        smoke = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", text],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr
        lines = smoke.stdout.splitlines()
        assert f"127.0.0.1:{ports[5050]}: SERVING" in lines
        assert any(line.startswith("xnode_build_info{") for line in lines), lines
        assert sum(line.startswith("100:1 ") for line in lines) == 2, lines  # published, read
        node.terminate()  # the unit's KillSignal: the drain, exit 0
        assert node.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if node.poll() is None:
            node.kill()
            node.wait(30)
        print_logs_if_failed(request, [log])
