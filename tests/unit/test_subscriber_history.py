"""The subscription checker (tests/support/subscriber_history.py) finds each way a subscription
can fail its rule, and passes a history that keeps it."""

from __future__ import annotations

from tests.support.subscriber_history import History, check

A, B = b"\x00a", b"\x00b"
ACKED = {(100, 1): A, (100, 2): B, (100, 3): A, (200, 1): A, (200, 2): B}


def _all_at_once(history: History, order: list[tuple[bytes, int, int]]) -> None:
    call = history.open()
    for topic, originator, sequence_id in order:
        call.receive(topic, originator, sequence_id)


def test_a_subscriber_that_saw_everything_once_in_order_passes() -> None:
    history = History("s", frozenset({A, B}))
    _all_at_once(history, [(A, 100, 1), (A, 200, 1), (B, 100, 2), (A, 100, 3), (B, 200, 2)])
    verdict = check([history], ACKED)
    assert verdict.ok and verdict.observed == 5 and not verdict.left_to_resume


def test_a_missing_envelope_is_skipped_and_one_seen_twice_is_duplicated() -> None:
    history = History("s", frozenset({A, B}))
    first = history.open()
    first.receive(A, 100, 1)
    first.receive(A, 200, 1)
    first.end("UNAVAILABLE")
    second = history.open({A: {100: 1}, B: {100: 1}})  # 200's first again, and 100's 2 lost
    second.receive(A, 200, 1)
    second.receive(A, 100, 3)
    second.receive(B, 200, 2)
    verdict = check([history], ACKED)
    assert verdict.skipped == [("s", (100, 2))]
    assert verdict.duplicated == [("s", (200, 1))]
    assert verdict.ended_with_status == {"UNAVAILABLE": 1}


def test_order_is_per_originator_and_from_the_cursor_the_call_was_opened_at() -> None:
    history = History("s", frozenset({A, B}))
    call = history.open({A: {100: 1}, B: {100: 1}})
    call.receive(A, 100, 3)
    call.receive(B, 100, 2)  # after 3 of the same originator, on the one cursor
    call.receive(A, 100, 1)  # at the cursor it was opened from
    verdict = check([history], ACKED)
    assert verdict.out_of_order == [("s", (100, 2)), ("s", (100, 1))]


def test_with_a_cursor_per_topic_each_topic_has_its_own_order() -> None:
    history = History("s", frozenset({A, B}), per_topic=True)
    _all_at_once(history, [(A, 100, 3), (B, 100, 2), (A, 200, 1), (B, 200, 2), (A, 100, 1)])
    verdict = check([history], ACKED)
    assert verdict.out_of_order == [("s", (100, 1))]  # only the repeat on topic A


def test_an_envelope_of_another_topic_is_foreign() -> None:
    history = History("s", frozenset({A}))
    _all_at_once(history, [(A, 100, 1), (B, 100, 2), (A, 100, 3), (A, 200, 1)])
    assert check([history], ACKED).foreign == [("s", (100, 2))]


def test_an_ending_status_leaves_what_lies_past_its_cursor_to_the_next_call() -> None:
    history = History("s", frozenset({A}))
    call = history.open()
    call.receive(A, 100, 1)
    call.end("UNAVAILABLE", {A: {100: 1}})
    verdict = check([history], ACKED)
    assert verdict.ok and verdict.left_to_resume == 2  # (100, 3) and (200, 1)


def test_a_status_naming_a_cursor_that_skips_or_repeats_is_a_bad_resume() -> None:
    ahead, behind = History("ahead", frozenset({A})), History("behind", frozenset({A}))
    for history, named in ((ahead, {100: 3}), (behind, {})):
        call = history.open()
        call.receive(A, 100, 1)
        call.end("UNAVAILABLE", {A: named})
    verdict = check([ahead, behind], ACKED)
    assert [name for name, _ in verdict.bad_resumes] == ["ahead", "behind"]


def test_a_cursor_past_envelopes_of_other_topics_only_is_a_good_resume() -> None:
    history = History("s", frozenset({A, B}), per_topic=True)
    call = history.open()
    call.receive(A, 100, 1)
    call.receive(B, 100, 2)
    call.end("UNAVAILABLE", {A: {100: 2}, B: {100: 2}})  # one cursor for both topics
    assert check([history], ACKED).bad_resumes == []


def test_envelopes_before_the_first_cursor_and_unacknowledged_ones_are_not_owed() -> None:
    history = History("s", frozenset({A}))
    call = history.open({A: {100: 1}})
    call.receive(A, 100, 3)
    call.receive(A, 200, 1)
    call.receive(A, 300, 1)  # never acknowledged: its publish's answer was lost
    verdict = check([history], ACKED)
    assert verdict.ok and verdict.observed == 3
