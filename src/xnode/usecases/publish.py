"""Publishing payer envelopes (XIP-49 3.3.4): validate each, check `depends_on` against the
node's vector clock, send chain-bound payloads to the chain, originate the rest.

Answers come in request order; a refusal names the request index (`payer_envelopes[3]`)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.envelopes import ValidPayerEnvelope, check_depends_on, validate_payer_envelope
from xnode.core.errors import Reason, Rejected
from xnode.core.sizes import Sizes
from xnode.core.vector_clock import NodeClock
from xnode.observability.metrics import ENVELOPES_STORED, PUBLISH_LATENCY
from xnode.usecases.admission import Admission
from xnode.usecases.identity import IdentityUpdates, has_updates
from xnode.usecases.limits import ANONYMOUS, ApiLimits, Caller
from xnode.usecases.ports import ChainPublisher, CryptoThreads, EnvelopeReader, Originate

T = TypeVar("T")

MAX_PUBLISH_ENVELOPES = 1000
# Batches this large are validated in a crypto thread (signature recovery releases the GIL).
# Smaller ones on the loop: a hop per request costs more than the recovery it moves, and
# gathering the small publishes of one loop turn into one hop found about one per turn (grpc
# hands the loop one call at a time), so each single paid a hop (docs/benchmarks.md).
THREAD_VALIDATION_MIN = 32


def validate_all(
    envelopes: Sequence[envelopes_pb2.PayerEnvelope], node_id: int
) -> list[ValidPayerEnvelope]:
    valid = []
    for i, payer in enumerate(envelopes):
        try:
            valid.append(validate_payer_envelope(payer, node_id))
        except Rejected as exc:
            raise exc.at(i) from None
    return valid


def check_sizes(envelopes: Sequence[envelopes_pb2.PayerEnvelope], sizes: Sizes) -> None:
    """Before any other work: every envelope under the caps, and the answer sendable."""
    lengths = [payer.ByteSize() for payer in envelopes]
    for i, (payer, size) in enumerate(zip(envelopes, lengths, strict=True)):
        try:
            sizes.check_payer_envelope(size, payer.message_retention_days)
        except Rejected as exc:
            raise exc.at(i) from None
    sizes.check_publish_answer(lengths)


async def _in_request(publish: Awaitable[list[bytes]], positions: list[int]) -> list[bytes]:
    """The chain publisher names envelopes by their place among the chain-bound ones; the
    client needs their place in its request."""
    try:
        return await publish
    except Rejected as exc:
        if exc.index is None:
            raise
        raise exc.at(positions[exc.index]) from None


READ_ONLY_DETAIL = (
    "this is a read-only node (XIP-49 3.4): it replicates and serves queries and subscriptions "
    "but originates nothing; publish to a registered node instead (the gateway's GetNodes or "
    "the node registry lists them)"
)


class _DefaultExecutor:
    """The loop's default executor, for tests and tools that build Publish directly."""

    async def run(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, call)


class Publish:
    """`originator` None: a read-only node, which refuses every publish with READ_ONLY.
    `crypto`: where large batches are validated (the process's crypto threads)."""

    def __init__(
        self,
        node_id: int,
        clock: NodeClock,
        store: EnvelopeReader,
        originator: Originate | None,
        chain: ChainPublisher | None = None,
        admission: Admission | None = None,
        limits: ApiLimits | None = None,
        identity: IdentityUpdates | None = None,
        crypto: CryptoThreads | None = None,
        sizes: Sizes | None = None,
    ) -> None:
        """`sizes`: the caps on payer envelopes and retention (default: core.sizes')."""
        self.node_id = node_id
        self._sizes = sizes or Sizes()
        self._crypto = crypto or _DefaultExecutor()
        self._identity = identity
        self.admission = admission or Admission()
        self._limits = limits
        self._clock = clock
        self._store = store
        self._originator = originator
        self._chain = chain
        self._stored = ENVELOPES_STORED.labels(str(node_id))

    async def __call__(
        self, envelopes: Sequence[envelopes_pb2.PayerEnvelope], caller: Caller = ANONYMOUS
    ) -> list[bytes]:
        """The serialized OriginatorEnvelopes, one per payer envelope, in request order;
        Rejected(UNAVAILABLE) before any work once the node drains. Raises LimitExceeded,
        before anything is stored, when the caller or a payer is over its limits."""
        admission = self.admission
        admission.enter()
        try:
            return await self._publish(envelopes, caller)
        finally:
            admission.leave()

    async def _publish(
        self, envelopes: Sequence[envelopes_pb2.PayerEnvelope], caller: Caller
    ) -> list[bytes]:
        started = time.perf_counter()
        if self._originator is None:
            raise Rejected(Reason.READ_ONLY, READ_ONLY_DETAIL)
        if not envelopes:
            raise Rejected(Reason.MALFORMED, "payer_envelopes is empty")
        if len(envelopes) > MAX_PUBLISH_ENVELOPES:
            raise Rejected(
                Reason.LIMIT_EXCEEDED,
                f"{len(envelopes)} payer envelopes in one request, the limit is "
                f"{MAX_PUBLISH_ENVELOPES}",
            )
        check_sizes(envelopes, self._sizes)
        if len(envelopes) >= THREAD_VALIDATION_MIN:
            valid = await self._crypto.run(functools.partial(validate_all, envelopes, self.node_id))
        else:
            valid = validate_all(envelopes, self.node_id)
        if self._limits is not None:
            await self._limits.publish(caller, valid)
        if self._chain is not None:
            # Before the vector clock: a node whose index is behind answers UNAVAILABLE.
            await self._chain.check_originated(valid)
        covers = self._clock.value.covers
        if not all(covers(envelope.depends_on) for envelope in valid):
            await self._check_depends_on(valid)
        identity = self._identity
        if identity is None or not has_updates(valid):
            # Nothing to hold or check (the common case): no context managers per publish.
            answers = await self._route(valid)
        else:
            # XIP-46: an identity update that does not apply never reaches the chain.
            async with identity.serialized(valid):
                await identity.check(valid)
                answers = await self._route(valid)
        PUBLISH_LATENCY.observe(time.perf_counter() - started)
        return answers

    async def _check_depends_on(self, valid: list[ValidPayerEnvelope]) -> None:
        for i, envelope in enumerate(valid):
            if self._clock.value.covers(envelope.depends_on):
                continue
            # The in-memory clock may trail commits of other processes: ask the store once.
            self._clock.merge(await self._store.vector_clock())
            try:
                check_depends_on(envelope, self._clock.value)
            except Rejected as exc:
                raise exc.at(i) from None

    async def _route(self, valid: list[ValidPayerEnvelope]) -> list[bytes]:
        """Chain-bound payloads go to the chain, the rest are originated. The chain part goes
        first: when it is refused (a stale depends_on, the chain unreachable), nothing of the
        request has been stored."""
        chain = self._chain
        to_chain = [i for i, e in enumerate(valid) if chain is not None and chain.handles(e)]
        if chain is None or not to_chain:
            return await self._originate(valid)
        chain_set = set(to_chain)
        local = [e for i, e in enumerate(valid) if i not in chain_set]
        chain_raw = await _in_request(chain.publish([valid[i] for i in to_chain]), to_chain)
        local_raw = await self._originate(local) if local else []
        chain_iter, local_iter = iter(chain_raw), iter(local_raw)
        return [next(chain_iter) if i in chain_set else next(local_iter) for i in range(len(valid))]

    async def _originate(self, valid: list[ValidPayerEnvelope]) -> list[bytes]:
        assert self._originator is not None  # refused in _publish
        originated = await self._originator.publish(valid)
        self._stored.inc(len(originated))
        return [e.raw for e in originated]
