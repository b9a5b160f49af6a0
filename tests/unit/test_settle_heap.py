from __future__ import annotations

import gc

from xnode.server import settle_heap


def test_settle_heap_moves_the_start_up_heap_out_of_collections() -> None:
    held = [[i] for i in range(1000)]  # containers the collector tracks
    try:
        settle_heap()
        assert gc.get_freeze_count() >= len(held)
        assert all(not any(x is h for x in gc.get_objects(2)) for h in held[:3])
    finally:
        gc.unfreeze()
