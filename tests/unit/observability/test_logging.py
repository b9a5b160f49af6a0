"""Every log line in the configured format, the libraries' (standard logging) included."""

from __future__ import annotations

import json
import subprocess
import sys

# A process of its own: the test runner's log handlers would otherwise take the library lines.
PROGRAM = """
import logging, structlog
from xnode.observability.logging import configure_logging
configure_logging("info", "json")
structlog.get_logger("xnode.test").warning("node_event", node_id=100)
logging.getLogger("grpc._cython").warning("a library said %s", "this")
"""


def test_a_library_line_is_json_like_the_nodes_own() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, check=True
    )
    own, library = [json.loads(line) for line in done.stderr.splitlines()]
    assert own["event"] == "node_event" and own["level"] == "warning"
    assert library["event"] == "a library said this"
    assert library["level"] == "warning" and library["logger"] == "grpc._cython"
    assert library["timestamp"].endswith("Z")
