"""The drain's admission gate: refusals before any work, accepted requests waited for."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.usecases.fakes import NODE, FakeOriginator, MemoryStore, payer_envelope
from xnode.core.cursors import Cursor
from xnode.core.errors import Reason, Rejected
from xnode.core.vector_clock import NodeClock
from xnode.usecases.admission import Admission
from xnode.usecases.publish import Publish


async def test_a_closed_gate_refuses_with_unavailable() -> None:
    admission = Admission()
    admission.close()
    with pytest.raises(Rejected) as refused, admission.admit():
        pass
    assert refused.value.reason is Reason.UNAVAILABLE


async def test_drained_waits_for_every_accepted_request() -> None:
    admission = Admission()
    release = asyncio.Event()

    async def accepted() -> None:
        with admission.admit():
            await release.wait()

    task = asyncio.create_task(accepted())
    await asyncio.sleep(0)
    admission.close()
    assert admission.in_flight == 1
    assert not await admission.drained(0.05)
    release.set()
    assert await admission.drained(1.0, quiet_s=0.0)
    await task


async def test_drained_waits_until_refusals_go_quiet() -> None:
    admission = Admission()
    admission.close()
    with pytest.raises(Rejected), admission.admit():
        pass
    assert not await admission.drained(0.05, quiet_s=0.5)
    assert await admission.drained(1.0, quiet_s=0.1)


async def test_a_draining_publish_does_no_work() -> None:
    originator = FakeOriginator()
    admission = Admission()
    publish = Publish(NODE, NodeClock(Cursor()), MemoryStore(), originator, None, admission)
    admission.close()
    with pytest.raises(Rejected) as refused:
        await publish([payer_envelope(b"late")])
    assert refused.value.reason is Reason.UNAVAILABLE
    assert not originator.published


async def test_drained_waits_quiet_after_an_answer_just_before_the_close() -> None:
    """A caller answered just before the close sends its next publish a moment later: the
    server must not stop before that publish has been refused."""
    admission = Admission()
    with admission.admit():
        pass
    admission.close()
    assert admission.in_flight == 0
    assert not await admission.drained(0.05, quiet_s=0.5)
    assert await admission.drained(1.0, quiet_s=0.1)


async def test_a_node_that_answered_nothing_drains_at_once() -> None:
    admission = Admission()
    admission.close()
    assert await admission.drained(0.0, quiet_s=0.5)


async def test_an_answer_after_the_close_restarts_the_quiet() -> None:
    admission = Admission()
    release = asyncio.Event()

    async def accepted() -> None:
        with admission.admit():
            await release.wait()

    task = asyncio.create_task(accepted())
    await asyncio.sleep(0)
    admission.close()
    await asyncio.sleep(0.3)
    release.set()
    await task
    assert not await admission.drained(0.1, quiet_s=0.25)
    assert await admission.drained(1.0, quiet_s=0.25)
