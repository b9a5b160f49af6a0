"""Cross-originator message ordering on the client (XIP-49 3.3.5): an envelope is delivered
only once everything its authenticated data says it depends on (aad.depends_on, the sender's
cursor for the topic) has been delivered on that topic.

Entries of depends_on beyond what the topic can hold are no dependency on the topic's own
payloads when the client started later than them: the topic's cursor starts at the client's
starting cursor, so what came before the start counts as seen."""

from __future__ import annotations

from collections.abc import Iterable

from xnode.core.client_checks import CheckedEnvelope, MissingDependency
from xnode.core.cursors import Cursor


def timestamp_key(env: CheckedEnvelope) -> tuple[int, bool, int, int, int]:
    """3.3.5's timestamp order: by the chain dependency, commits first, then originator time
    (originator and sequence id make it total)."""
    return (
        env.depends_on.get(0),
        not env.is_commit,
        env.originator_ns,
        env.originator_node_id,
        env.sequence_id,
    )


class TopicOrder:
    """One topic's causal order: `offer` holds an envelope back until its dependencies are
    delivered and returns what became deliverable, in order."""

    def __init__(self, start: Cursor | None = None) -> None:
        self.cursor = start or Cursor()
        self.pending: list[CheckedEnvelope] = []

    def offer(self, env: CheckedEnvelope) -> list[CheckedEnvelope]:
        self.pending.append(env)
        self.pending.sort(key=timestamp_key)
        return self._drain()

    def _drain(self) -> list[CheckedEnvelope]:
        ready: list[CheckedEnvelope] = []
        progress = True
        while progress:
            progress = False
            for i, env in enumerate(self.pending):
                if self.cursor.covers(env.depends_on):
                    ready.append(self._apply(self.pending.pop(i)))
                    progress = True
                    break
        return ready

    def _apply(self, env: CheckedEnvelope) -> CheckedEnvelope:
        self.cursor = self.cursor.merge({env.originator_node_id: env.sequence_id})
        return env

    def missing(self) -> MissingDependency | None:
        """What the first held-back envelope waits for, or None when nothing is held."""
        if not self.pending:
            return None
        env = self.pending[0]
        lacking = self.cursor.lagging(env.depends_on)
        listed = ", ".join(f"{n}:{s}" for n, s in sorted(lacking.items()))
        return MissingDependency(
            f"depends on {listed}, not seen on topic {env.topic.hex()}",
            env.originator_node_id,
            env.sequence_id,
        )

    def force_next(self) -> list[CheckedEnvelope]:
        """3.3.5's fallback for a dependency that is not found: apply the held-back envelope
        with the smallest timestamp, then whatever that unblocks."""
        if not self.pending:
            return []
        return [self._apply(self.pending.pop(0)), *self._drain()]


class CausalOrder:
    """Causal order per topic over a stream of checked envelopes."""

    def __init__(self, start: Cursor | None = None) -> None:
        self.start = start or Cursor()
        self.topics: dict[bytes, TopicOrder] = {}

    def topic(self, topic: bytes) -> TopicOrder:
        if topic not in self.topics:
            self.topics[topic] = TopicOrder(self.start)
        return self.topics[topic]

    def offer(self, env: CheckedEnvelope) -> list[CheckedEnvelope]:
        return self.topic(env.topic).offer(env)

    def held_back(self) -> int:
        return sum(len(t.pending) for t in self.topics.values())


def causally_order(
    envelopes: Iterable[CheckedEnvelope], start: Cursor | None = None, strict: bool = False
) -> list[CheckedEnvelope]:
    """A finished batch (a query's answer) in causal order per topic. A dependency that is not
    in the batch raises MissingDependency when `strict`; otherwise the smallest timestamp goes
    next, as 3.3.5 allows."""
    order = CausalOrder(start)
    ordered = [ready for env in envelopes for ready in order.offer(env)]
    for topic in order.topics.values():
        while topic.pending:
            problem = topic.missing()
            if strict and problem is not None:
                raise problem
            ordered.extend(topic.force_next())
    return ordered
