"""Values shared by the store adapter and the core's delivery logic."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoredEnvelope:
    """An envelope as the store and live delivery carry it: its keys and its signed bytes."""

    originator_node_id: int
    sequence_id: int
    topic: bytes
    raw: bytes
    expiry: int = 0  # unix seconds, 0 = never; live delivery drops what has expired
