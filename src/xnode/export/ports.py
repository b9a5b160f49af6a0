"""What the Parquet writer takes: pages of rows as columns. xnode.store.export's pages have
this shape; the writer names only the shape, so it needs no database adapter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class EnvelopeRows(Protocol):
    """Consecutive envelope rows of one originator, in sequence order, as columns."""

    @property
    def originator_node_id(self) -> int: ...
    @property
    def sequence_ids(self) -> Sequence[int]: ...
    @property
    def originator_ns(self) -> Sequence[int]: ...
    @property
    def topics(self) -> Sequence[bytes]: ...
    @property
    def expiry_unixtime(self) -> Sequence[int | None]: ...
    @property
    def payer_addresses(self) -> Sequence[bytes | None]: ...
    @property
    def sizes(self) -> Sequence[int]: ...
    @property
    def base_fees(self) -> Sequence[int]: ...
    @property
    def congestion_fees(self) -> Sequence[int]: ...
    @property
    def envelopes(self) -> Sequence[bytes] | None:
        """The signed envelopes, only when payloads are exported."""


class ReportRows(Protocol):
    """Consecutive misbehavior reports of the node, in id order, as columns."""

    @property
    def ids(self) -> Sequence[int]: ...
    @property
    def server_time_ns(self) -> Sequence[int]: ...
    @property
    def misbehaving_node_ids(self) -> Sequence[int]: ...
    @property
    def types(self) -> Sequence[int]: ...
    @property
    def submitted_by_node(self) -> Sequence[bool]: ...
    @property
    def reports(self) -> Sequence[bytes]: ...
