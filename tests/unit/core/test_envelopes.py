"""IndexedEnvelope crosses to and from the verifying processes pickled, every field kept."""

from __future__ import annotations

import dataclasses
import pickle

from xnode.core.envelopes import IndexedEnvelope


def test_an_indexed_envelope_pickles_with_every_field() -> None:
    env = IndexedEnvelope(100, 7, 123, b"topic", 0, None, b"raw", b"leaf", 5, 6)
    back = pickle.loads(pickle.dumps(env, protocol=pickle.HIGHEST_PROTOCOL))
    assert dataclasses.astuple(back) == dataclasses.astuple(env)
    assert back.leaf == b"leaf"  # not compared by ==
