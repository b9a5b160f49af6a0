"""Health check of the anvil image: exit 0 when the chain answers eth_blockNumber."""

import json
import sys
import urllib.request

request = urllib.request.Request(
    "http://127.0.0.1:8545",
    data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber"}).encode(),
    headers={"Content-Type": "application/json"},
)
try:
    with urllib.request.urlopen(request, timeout=2) as response:
        sys.exit(0 if "result" in json.load(response) else 1)
except OSError:
    sys.exit(1)
