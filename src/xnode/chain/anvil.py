"""Start and stop a local anvil chain (tests and the devnet).

The anvil binary comes from the pinned npm package ``@foundry-rs/anvil-linux-amd64``
(``npm ci`` in the repository root). Set ``XNODE_ANVIL_BIN`` (the setting anvil_bin) to use
another binary.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Final

ANVIL_BIN_ENV: Final = "XNODE_ANVIL_BIN"
ANVIL_NPM_RELATIVE_PATH: Final = Path("node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil")
DEFAULT_CHAIN_ID: Final = 31337

# The 10 dev accounts anvil funds by default (mnemonic "test test ... junk", m/44'/60'/0'/0/i).
DEFAULT_DEV_PRIVATE_KEYS: Final[tuple[str, ...]] = (
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
)
DEFAULT_DEV_ADDRESSES: Final[tuple[str, ...]] = (
    "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
    "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
    "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65",
    "0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc",
    "0x976EA74026E726554dB657fA54763abd0C3a0aa9",
    "0x14dC79964da2C08b23698B3D3cc7Ca32193d9955",
    "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
    "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
)

_LISTENING_RE: Final = re.compile(rb"Listening on ([0-9A-Za-z.\-:\[\]]+):(\d+)")


class AnvilError(RuntimeError):
    """anvil could not be found or did not start."""


class AnvilNotInstalledError(AnvilError, FileNotFoundError):
    """The anvil binary is missing (run ``npm ci``)."""


def find_anvil_binary(start: Path | None = None, override: Path | None = None) -> Path:
    """Locate anvil: `override` (the setting anvil_bin), else node_modules/ in ``start``
    (default: the current directory) or a parent, else node_modules/ above this source file
    (a source checkout)."""
    if override is not None:
        if not override.is_file():
            raise AnvilNotInstalledError(f"{ANVIL_BIN_ENV}={override} is not a file")
        return override
    bases = [(start or Path.cwd()).resolve(), Path(__file__).resolve().parent]
    for base in bases:
        for directory in (base, *base.parents):
            candidate = directory / ANVIL_NPM_RELATIVE_PATH
            if candidate.is_file():
                return candidate
    raise AnvilNotInstalledError(
        f"anvil binary not found ({ANVIL_NPM_RELATIVE_PATH}); run `npm ci` in the repository root"
    )


def rpc_call(
    url: str, method: str, params: list[object] | None = None, timeout: float = 5.0
) -> object:
    """Minimal JSON-RPC call (no web3 needed). Returns ``result``; raises AnvilError on errors."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []})
    request = urllib.request.Request(
        url, data=body.encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        reply = json.loads(response.read())
    if not isinstance(reply, dict):
        raise AnvilError(f"{method}: malformed reply {reply!r}")
    if "error" in reply:
        raise AnvilError(f"{method}: {reply['error']!r}")
    result: object = reply.get("result")
    return result


@dataclass
class AnvilProcess:
    """A running anvil. ``stop()`` (or leaving a ``with`` block) terminates it."""

    proc: subprocess.Popen[bytes]
    host: str
    port: int
    chain_id: int
    log_path: Path
    private_keys: tuple[str, ...] = DEFAULT_DEV_PRIVATE_KEYS
    addresses: tuple[str, ...] = DEFAULT_DEV_ADDRESSES
    _log_file: IO[bytes] | None = field(default=None, repr=False)
    _owns_log: bool = field(default=True, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, max_bytes: int = 4000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-max_bytes:].decode(errors="replace")

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate anvil (SIGTERM, then SIGKILL after ``timeout``). Idempotent."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
            if self._owns_log:
                self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> AnvilProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_anvil(
    block_time: float | None = None,
    *,
    binary: Path | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    chain_id: int = DEFAULT_CHAIN_ID,
    extra_args: tuple[str, ...] = (),
    log_path: Path | None = None,
    startup_timeout: float = 15.0,
) -> AnvilProcess:
    """Start anvil and wait until it answers ``eth_chainId``.

    ``block_time=None`` mines one block per transaction (automine); otherwise a block is mined
    every ``block_time`` seconds. ``port=0`` lets anvil pick a free port (read from its output).
    anvil's output goes to ``log_path`` (default: a temporary file removed by ``stop()``).
    """
    anvil = binary if binary is not None else find_anvil_binary()
    if not anvil.is_file():
        raise AnvilNotInstalledError(f"{anvil} does not exist; run `npm ci` in the repository root")
    args = [str(anvil), "--host", host, "--port", str(port), "--chain-id", str(chain_id)]
    if block_time is not None:
        if block_time <= 0:
            raise ValueError("block_time must be positive")
        args += ["--block-time", f"{block_time:g}"]
    args += list(extra_args)

    owns_log = log_path is None
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="anvil-", suffix=".log")
        os.close(fd)
        log_path = Path(name)
    log_file = log_path.open("wb")
    try:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
        )
    except BaseException:
        log_file.close()
        if owns_log:
            log_path.unlink(missing_ok=True)
        raise
    anvil_proc = AnvilProcess(
        proc=proc,
        host=host,
        port=port,
        chain_id=chain_id,
        log_path=log_path,
        _log_file=log_file,
        _owns_log=owns_log,
    )
    try:
        _wait_ready(anvil_proc, startup_timeout)
    except AnvilError as exc:
        tail = anvil_proc.log_tail()
        anvil_proc.stop()
        raise AnvilError(f"{exc}; anvil output ends with:\n{tail}") from exc
    except BaseException:
        anvil_proc.stop()
        raise
    return anvil_proc


def _wait_ready(anvil: AnvilProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while anvil.port == 0:
        match = _LISTENING_RE.search(anvil.log_path.read_bytes())
        if match:
            anvil.port = int(match.group(2))
            break
        _check_alive_and_sleep(anvil, deadline, "print its listening address")
    while True:
        try:
            chain_id = rpc_call(anvil.url, "eth_chainId", timeout=1.0)
        except (OSError, urllib.error.URLError, AnvilError):
            _check_alive_and_sleep(anvil, deadline, f"answer eth_chainId on {anvil.url}")
            continue
        if not isinstance(chain_id, str) or int(chain_id, 16) != anvil.chain_id:
            raise AnvilError(f"unexpected eth_chainId {chain_id!r} from {anvil.url}")
        return


def _check_alive_and_sleep(anvil: AnvilProcess, deadline: float, what: str) -> None:
    code = anvil.proc.poll()
    if code is not None:
        raise AnvilError(f"anvil exited with code {code} before it could {what}")
    if time.monotonic() > deadline:
        raise AnvilError(f"anvil did not {what} in time")
    time.sleep(0.05)
