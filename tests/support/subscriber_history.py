"""A checker of subscribers' histories, in the manner of Jepsen's and etcd's watch checkers: the
rule is that a subscription never skips.

Each subscriber records what it did: the calls it opened (with the cursor of each topic it
opened them from), every envelope each call delivered, and how each call ended (the status,
and the cursor the status named to resume from, if any). The checker is given every
acknowledged envelope (originator, sequence id, topic) and finds, per subscriber:
- skipped: an acknowledged envelope of its topics, past the cursor it first subscribed from,
  that it never received (unless its last call ended with a status and the envelope lies past
  where it was told to resume: that one is left to the next call, not skipped);
- duplicated: an envelope received more than once, over all its calls;
- out of order: within one call, an originator's sequence id not above the last one received
  for the same cursor (the topic's, or the call's one cursor), or not above the cursor the
  call was opened from;
- foreign: an envelope of a topic it did not subscribe to;
- bad resume: a status naming a cursor that skips (past an acknowledged envelope of the topic
  the subscriber has not received) or repeats (short of one it received).
Envelopes received and never acknowledged (a publish whose answer was lost) are observed and
nothing else: the node may have stored them.

Pure: the harness records, this module judges. The cursors are plain {originator: sequence id}
dicts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

Key = tuple[int, int]  # (originator node id, originator sequence id)
Tops = dict[int, int]  # a cursor: originator node id -> last sequence id


@dataclass(frozen=True, slots=True)
class Received:
    topic: bytes
    originator: int
    sequence_id: int

    @property
    def key(self) -> Key:
        return (self.originator, self.sequence_id)


@dataclass
class Call:
    """One subscribe call: opened from `start` (per topic), what it delivered, how it ended."""

    start: dict[bytes, Tops]
    received: list[Received] = field(default_factory=list)
    status: str | None = None  # the code it ended with; None: open, or closed by the client
    resume: dict[bytes, Tops] | None = None  # where the status said to resume, per topic

    def receive(self, topic: bytes, originator: int, sequence_id: int) -> None:
        self.received.append(Received(topic, originator, sequence_id))

    def end(self, status: str, resume: dict[bytes, Tops] | None = None) -> None:
        self.status, self.resume = status, resume


@dataclass
class History:
    """A subscriber of `topics`. `per_topic`: each topic has its own cursor (SubscribeTopics);
    otherwise one cursor covers them all (SubscribeEnvelopes)."""

    name: str
    topics: frozenset[bytes]
    per_topic: bool = False
    calls: list[Call] = field(default_factory=list)

    def open(self, start: Mapping[bytes, Tops] | None = None) -> Call:
        cursors = {t: dict((start or {}).get(t, {})) for t in self.topics}
        call = Call(cursors)
        self.calls.append(call)
        return call

    def position(self) -> dict[bytes, Tops]:
        """Where it got to, per topic: what a client resumes from when no status says."""
        tops = {t: dict(c) for t, c in (self.calls[0].start if self.calls else {}).items()}
        for call in self.calls:
            for topic, cursor in call.start.items():
                _raise(tops.setdefault(topic, {}), cursor)
            for got in call.received:
                _raise(tops.setdefault(got.topic, {}), {got.originator: got.sequence_id})
        if not self.per_topic:  # one cursor: every topic's is the same
            merged: Tops = {}
            for cursor in tops.values():
                _raise(merged, cursor)
            tops = {t: dict(merged) for t in tops}
        return tops


def _raise(tops: Tops, by: Mapping[int, int]) -> None:
    for originator, sequence_id in by.items():
        if sequence_id > tops.get(originator, 0):
            tops[originator] = sequence_id


@dataclass
class Verdict:
    observed: int = 0
    skipped: list[tuple[str, Key]] = field(default_factory=list)
    duplicated: list[tuple[str, Key]] = field(default_factory=list)
    out_of_order: list[tuple[str, Key]] = field(default_factory=list)
    foreign: list[tuple[str, Key]] = field(default_factory=list)
    bad_resumes: list[tuple[str, str]] = field(default_factory=list)
    left_to_resume: int = 0  # past an ending status's cursor, for the next call
    calls: int = 0
    ended_with_status: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not (
            self.skipped or self.duplicated or self.out_of_order or self.foreign or self.bad_resumes
        )

    def summary(self) -> str:
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(self.ended_with_status.items()))
        return (
            f"{self.observed} envelopes observed in {self.calls} calls ({statuses or 'no call'}"
            f" ended with a status): skipped {len(self.skipped)}, duplicated"
            f" {len(self.duplicated)}, out of order {len(self.out_of_order)}, foreign"
            f" {len(self.foreign)}, bad resumes {len(self.bad_resumes)}"
        )


def check(histories: list[History], acknowledged: Mapping[Key, bytes]) -> Verdict:
    """Judges every history against the acknowledged envelopes (key -> topic)."""
    verdict = Verdict()
    for history in histories:
        _check_one(history, acknowledged, verdict)
    return verdict


def _check_one(history: History, acknowledged: Mapping[Key, bytes], verdict: Verdict) -> None:
    name = history.name
    seen: Counter[Key] = Counter()
    for call in history.calls:
        verdict.calls += 1
        _check_call(history, call, verdict)
        seen.update(r.key for r in call.received)
        if call.status is not None:
            verdict.ended_with_status[call.status] += 1
    verdict.observed += sum(seen.values())
    verdict.duplicated += [(name, k) for k, n in sorted(seen.items()) if n > 1]
    _check_resumes(history, acknowledged, verdict)
    if not history.calls:
        return
    first = history.calls[0].start
    last = history.calls[-1]
    resume_from = None
    if last.status is not None:
        resume_from = last.resume if last.resume is not None else history.position()
    for key, topic in sorted(acknowledged.items()):
        originator, sequence_id = key
        if topic not in history.topics or key in seen:
            continue
        if sequence_id <= first.get(topic, {}).get(originator, 0):
            continue  # before it subscribed
        if resume_from is not None and sequence_id > resume_from.get(topic, {}).get(originator, 0):
            verdict.left_to_resume += 1
            continue
        verdict.skipped.append((name, key))


def _check_call(history: History, call: Call, verdict: Verdict) -> None:
    """Order within the call: per cursor (the topic's, or the call's one), per originator."""
    last: dict[tuple[bytes | None, int], int] = {}
    for got in call.received:
        if got.topic not in history.topics:
            verdict.foreign.append((history.name, got.key))
            continue
        group = got.topic if history.per_topic else None
        floor = last.get((group, got.originator))
        if floor is None:
            floor = _start_of(history, call, got)
        if got.sequence_id <= floor:
            verdict.out_of_order.append((history.name, got.key))
        else:
            last[(group, got.originator)] = got.sequence_id


def _start_of(history: History, call: Call, got: Received) -> int:
    if history.per_topic:
        return call.start.get(got.topic, {}).get(got.originator, 0)
    return max((c.get(got.originator, 0) for c in call.start.values()), default=0)


def _check_resumes(history: History, acknowledged: Mapping[Key, bytes], verdict: Verdict) -> None:
    """Resuming from a status's cursor must neither skip nor repeat: no acknowledged envelope
    of the topic lies between where the subscriber got to and the cursor, and it received
    nothing past the cursor. (A cursor may pass envelopes of other topics: a node keeps one
    cursor for topics subscribed from the same one, and names it for each.)"""
    by_topic: dict[bytes, list[Key]] = {}
    for key, topic in acknowledged.items():
        if topic in history.topics:
            by_topic.setdefault(topic, []).append(key)
    for n, call in enumerate(history.calls):
        if call.resume is None:
            continue
        upto = History(history.name, history.topics, history.per_topic, history.calls[: n + 1])
        position = upto.position()
        for topic, cursor in call.resume.items():
            at = position.get(topic, {})
            passed = [
                (o, s) for o, s in by_topic.get(topic, []) if at.get(o, 0) < s <= cursor.get(o, 0)
            ]
            repeated = {o: s for o, s in at.items() if s > cursor.get(o, 0)}
            if passed or repeated:
                verdict.bad_resumes.append(
                    (
                        history.name,
                        f"call {n} named {cursor} for {topic.hex()}: it got to {at}, the cursor"
                        f" skips {sorted(passed)[:5]} and repeats up to {repeated}",
                    )
                )
