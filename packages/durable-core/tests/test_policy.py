"""``RetryPolicy``, ``counts`` and ``failure_of``: how hard a kind is tried, and what a
failure leaves behind."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from durable.interfaces import Contended, Failure, Fenced, StoreError, StoreUnavailable, Suspended
from durable.policy import RetryPolicy, counts, failure_of


def never() -> float:
    return 0.0


def always() -> float:
    return 1.0


def test_the_default_policy_tries_ten_times_doubling_from_a_second_to_five_minutes() -> None:
    policy = RetryPolicy()
    waits = [policy.backoff(n, never) for n in range(1, policy.max_attempts)]
    assert waits[:4] == [timedelta(seconds=s) for s in (1, 2, 4, 8)]
    assert waits[-1] == timedelta(seconds=256)
    assert sum(waits, timedelta()) == timedelta(seconds=511)  # about eight and a half minutes
    assert policy.max_attempts == 10


def test_the_wait_is_capped_by_maximum_and_never_overflows() -> None:
    policy = RetryPolicy(initial=timedelta(seconds=1), maximum=timedelta(minutes=5))
    assert policy.backoff(9, never) == timedelta(seconds=256)
    assert policy.backoff(10, never) == timedelta(minutes=5)
    assert policy.backoff(10_000, never) == timedelta(minutes=5)
    huge = RetryPolicy(multiplier=1e6, maximum=timedelta(days=1))
    assert huge.backoff(5_000, never) == timedelta(days=1)


def test_jitter_only_shortens_the_wait_by_at_most_its_fraction() -> None:
    policy = RetryPolicy(initial=timedelta(seconds=10), jitter=0.2)
    assert policy.backoff(1, never) == timedelta(seconds=10)
    assert policy.backoff(1, always) == timedelta(seconds=8)
    assert policy.backoff(1, lambda: 0.5) == timedelta(seconds=9)
    uncapped = RetryPolicy(initial=timedelta(minutes=5), maximum=timedelta(minutes=5), jitter=1.0)
    assert uncapped.backoff(3, always) == timedelta(0)
    assert uncapped.backoff(3, never) == timedelta(minutes=5)


def test_the_default_jitter_draws_from_random_within_bounds() -> None:
    policy = RetryPolicy(initial=timedelta(seconds=10))
    drawn = {policy.backoff(1) for _ in range(50)}
    assert all(timedelta(seconds=8) <= wait <= timedelta(seconds=10) for wait in drawn)
    assert len(drawn) > 1, "fifty draws of the jitter all came out the same"


def test_a_multiplier_of_one_waits_the_same_every_time() -> None:
    policy = RetryPolicy(initial=timedelta(seconds=3), multiplier=1.0, jitter=0.0)
    assert {policy.backoff(n) for n in range(1, 20)} == {timedelta(seconds=3)}


def test_attempts_are_counted_from_one() -> None:
    with pytest.raises(ValueError, match="counted from 1"):
        RetryPolicy().backoff(0, never)


class Declined(Exception):
    pass


class HardDeclined(Declined):
    pass


def test_gives_up_at_max_attempts_or_at_once_on_a_non_retryable_error() -> None:
    policy = RetryPolicy(max_attempts=3, non_retryable=(Declined,))
    assert not policy.gives_up(ValueError("x"), 1)
    assert not policy.gives_up(ValueError("x"), 2)
    assert policy.gives_up(ValueError("x"), 3)
    assert policy.gives_up(Declined("no"), 1)
    assert policy.gives_up(HardDeclined("no"), 1), "a subclass of a non-retryable error retried"
    assert RetryPolicy(max_attempts=1).gives_up(ValueError("x"), 1)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_attempts", 0, "max_attempts must be at least 1"),
        ("max_attempts", True, "max_attempts must be an int"),
        ("max_attempts", 2.5, "max_attempts must be an int"),
        ("initial", timedelta(0), "initial must be positive"),
        ("initial", 5, "initial must be a datetime.timedelta"),
        ("maximum", timedelta(milliseconds=1), "maximum .* must be at least initial"),
        ("multiplier", 0.5, "multiplier must be at least 1.0"),
        ("multiplier", float("inf"), "multiplier must be at least 1.0"),
        ("multiplier", "2", "multiplier must be a number"),
        ("jitter", 1.5, r"jitter must be in \[0, 1\]"),
        ("jitter", -0.1, r"jitter must be in \[0, 1\]"),
        ("non_retryable", [ValueError], "non_retryable must be a tuple"),
        ("non_retryable", (KeyboardInterrupt,), "non_retryable must be a tuple of Exception"),
    ],
)
def test_a_bad_field_is_refused_by_name(field: str, value: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=f"RetryPolicy.{message}"):
        RetryPolicy(**{field: value})


def test_interruptions_and_outages_never_count_and_everything_else_does() -> None:
    assert not counts(Fenced("superseded"))
    assert not counts(Contended("held"))
    assert not counts(Suspended("waiting"))
    assert not counts(StoreUnavailable("the server went away"))
    assert counts(ValueError("card declined"))
    assert counts(StoreError("a Lua effect failed")), "a body's own store error is its fault"


def raise_deep(depth: int) -> None:
    if depth == 0:
        raise Declined("card declined")
    raise_deep(depth - 1)


def test_failure_of_keeps_the_qualified_type_the_message_and_the_innermost_frames() -> None:
    try:
        raise_deep(30)
    except Declined as error:
        failure = failure_of(error, 4)
    assert failure == Failure(
        f"{__name__}.Declined", "card declined", failure.traceback, attempts=4
    )
    assert failure.traceback.endswith(f"{__name__}.Declined: card declined\n")
    assert failure.traceback.count("raise_deep") <= 8, "more than the innermost frames were kept"
    assert str(failure) == f"{__name__}.Declined: card declined"


def test_a_builtin_error_is_named_without_its_module() -> None:
    assert failure_of(ValueError("bad"), 1).type == "ValueError"


def test_failure_of_bounds_the_message_and_the_traceback() -> None:
    error = ValueError("é" * 5000)
    failure = failure_of(error, 1)
    assert len(failure.message) == 1000
    assert failure.message.endswith("…")
    assert len(failure.traceback) <= 4000
    assert failure.traceback.startswith("…")
    assert failure.traceback.endswith("é\n"), "the traceback's end, where the raise is, was cut"
