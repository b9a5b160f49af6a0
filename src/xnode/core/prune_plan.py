"""Retention plans (docs/export-format.md): parsed and checked in full before anything is
deleted, then cut into batches that each name at most `batch_size` sequence ids."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xnode.core.constants import GROUP_MESSAGES_ORIGINATOR, IDENTITY_UPDATES_ORIGINATOR

PLAN_VERSION = 1
# Originators of chain payloads, never pruned, as a refusal names them.
_CHAIN_PAYLOADS = {
    GROUP_MESSAGES_ORIGINATOR: "group-message commits",
    IDENTITY_UPDATES_ORIGINATOR: "identity updates",
}
_MAX_NODE_ID = 2**31 - 1
_MAX_SEQUENCE_ID = 2**63 - 1


class PlanError(ValueError):
    """A plan that must not be applied; nothing has been deleted."""


@dataclass(frozen=True, slots=True)
class PlanRange:
    originator_node_id: int
    first_sequence_id: int
    last_sequence_id: int

    @property
    def span(self) -> int:
        return self.last_sequence_id - self.first_sequence_id + 1


@dataclass(frozen=True, slots=True)
class Plan:
    as_of_unixtime: int
    envelope_count: int
    ranges: tuple[PlanRange, ...]


def _integer(value: Any, where: str, low: int, high: int) -> int:
    # bool is an int in Python; `true` in a plan is a mistake, not 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise PlanError(f"{where} must be an integer, got {json.dumps(value)}")
    if not low <= value <= high:
        raise PlanError(f"{where} is {value}, outside {low}..{high}")
    return value


def _range(item: Any, index: int) -> PlanRange:
    where = f"ranges[{index}]"
    if not isinstance(item, dict):
        raise PlanError(f"{where} must be an object")
    try:
        node, first, last = (
            item["originator_node_id"],
            item["first_sequence_id"],
            item["last_sequence_id"],
        )
    except KeyError as exc:
        raise PlanError(f"{where} lacks {exc.args[0]!r}") from None
    node = _integer(node, f"{where}.originator_node_id", 0, _MAX_NODE_ID)
    if node in _CHAIN_PAYLOADS:
        raise PlanError(
            f"{where} names originator {node} ({_CHAIN_PAYLOADS[node]} from the chain), "
            "which is never pruned"
        )
    first = _integer(first, f"{where}.first_sequence_id", 1, _MAX_SEQUENCE_ID)
    last = _integer(last, f"{where}.last_sequence_id", first, _MAX_SEQUENCE_ID)
    return PlanRange(node, first, last)


def parse_plan(document: Any) -> Plan:
    if not isinstance(document, dict):
        raise PlanError("a plan is a JSON object")
    if "version" not in document:
        raise PlanError("plan has no version")
    version = document["version"]
    if type(version) is not int or version != PLAN_VERSION:
        raise PlanError(f"plan version is {json.dumps(version)}, this xnode applies {PLAN_VERSION}")
    for key in ("as_of_unixtime", "envelope_count", "ranges"):
        if key not in document:
            raise PlanError(f"plan has no {key!r}")
    ranges = document["ranges"]
    if not isinstance(ranges, list):
        raise PlanError("plan 'ranges' must be a list")
    return Plan(
        _integer(document["as_of_unixtime"], "as_of_unixtime", 0, _MAX_SEQUENCE_ID),
        _integer(document["envelope_count"], "envelope_count", 0, _MAX_SEQUENCE_ID),
        tuple(_range(item, i) for i, item in enumerate(ranges)),
    )


def check_as_of(plan: Plan, now_unix: int) -> None:
    """A plan judges expiry at its `as_of`; one ahead of this node's clock would delete
    envelopes before they expire (their leaves then read as lost and their originators are
    accused of withholding), so it is refused."""
    if plan.as_of_unixtime > now_unix:
        raise PlanError(
            f"as_of_unixtime {plan.as_of_unixtime} is ahead of this node's clock ({now_unix}): "
            "a plan may only delete what has expired by now; make it again without --as-of "
            "or with a past one"
        )


def load_plan(path: Path) -> Plan:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"{path} is not JSON: {exc}") from None
    try:
        return parse_plan(document)
    except PlanError as exc:
        raise PlanError(f"{path}: {exc}") from None


def batches(ranges: Sequence[PlanRange], batch_size: int) -> Iterator[list[PlanRange]]:
    """Groups of ranges naming at most `batch_size` ids in all: a long range is cut into
    sub-ranges, short ones share a batch. So one batch deletes at most `batch_size` rows,
    however dense or sparse the table is."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    batch: list[PlanRange] = []
    room = batch_size
    for r in ranges:
        first = r.first_sequence_id
        while first <= r.last_sequence_id:
            last = min(r.last_sequence_id, first + room - 1)
            batch.append(PlanRange(r.originator_node_id, first, last))
            room -= last - first + 1
            first = last + 1
            if room == 0:
                yield batch
                batch, room = [], batch_size
    if batch:
        yield batch


def batch_count(ranges: Sequence[PlanRange], batch_size: int) -> int:
    """How many batches `batches` yields, without making them (for a progress bar)."""
    return -(-sum(r.span for r in ranges) // batch_size)
