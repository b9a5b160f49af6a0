"""What a refused gRPC call carries beside its status, as tests read it."""

from __future__ import annotations

from typing import Any

import grpc


def trailers(exc: grpc.aio.AioRpcError) -> dict[str, Any]:
    """The call's trailing metadata by key (str for text keys, bytes for `-bin` keys)."""
    metadata: Any = exc.trailing_metadata() or ()
    return {str(key): value for key, value in metadata}
