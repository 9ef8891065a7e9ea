"""The pacer on a clock of the test's own: window, rates, budget, the service's wait hint, AIMD and its
fast recovery from an isolated event."""

from __future__ import annotations

import itertools
import math

import pytest

from reconciler.namespace.pacing import INCREASE_PER_SECOND, RECOVERY_HALF_LIFE, RECURRING, Pacer

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def send(pacer: Pacer, clock: Clock, credits: float, *, charged: float | None = None, **answer) -> float:
    """Wait (on the fake clock) until the pacer lets one request go, answer it at once; the send time."""
    while (delay := pacer.try_acquire(credits)) > 0:
        assert delay != math.inf, "the window is full and nothing is in flight"
        clock.now += delay
    sent = clock.now
    pacer.release(credits, credits if charged is None else charged, sent=sent, **answer)
    return sent


def test_the_window_bounds_requests_in_flight():
    pacer = Pacer(window=2, clock=Clock())
    assert pacer.try_acquire() == 0 and pacer.try_acquire() == 0
    assert pacer.try_acquire() == math.inf
    pacer.release(0, 0)
    assert pacer.try_acquire() == 0


def test_the_request_rate_spaces_requests_evenly():
    clock = Clock()
    pacer = Pacer(max_rate=20, clock=clock)
    times = [send(pacer, clock, 0) for _ in range(5)]
    assert [round(b - a, 6) for a, b in itertools.pairwise(times)] == [0.05] * 4


def test_a_credit_budget_is_used_fully_and_never_exceeded():
    clock = Clock()
    pacer = Pacer(budget=400, clock=clock)
    start = clock.now
    times = [send(pacer, clock, 10) for _ in range(400)]  # management operations, 10 credits each
    elapsed = times[-1] - start
    assert 4000 / elapsed == pytest.approx(400, rel=0.02)
    for second in range(int(elapsed)):  # no second of the service's accounting gets more than budget + burst
        window = [t for t in times if start + second <= t < start + second + 1]
        assert len(window) * 10 <= 400 + 0.1 * 400 + 10


def test_a_peek_is_charged_what_came_back():
    clock = Clock()
    pacer = Pacer(budget=100, burst=0, clock=clock)
    send(pacer, clock, 250, charged=20)  # asked for 250 messages, 20 came back
    assert pacer.try_acquire(10) == pytest.approx(0.2, abs=1e-9)  # 20 credits at 100/s, not 250


def test_no_budget_means_credits_do_not_pace():
    clock = Clock()
    pacer = Pacer(clock=clock)
    for _ in range(1000):
        send(pacer, clock, 250)
    assert clock.now == 1000.0


def test_a_throttled_answer_holds_every_request_for_the_services_hint_and_halves_rate_and_window():
    clock = Clock()
    pacer = Pacer(window=16, budget=400, clock=clock)
    in_flight = [pacer.try_acquire(10) for _ in range(4)]
    assert in_flight == [0.0] * 4
    sent = clock.now
    clock.now += 0.01
    pacer.release(10, 0, throttled=True, hint=2.0, sent=sent)
    assert pacer.try_acquire(10) == pytest.approx(2.0)  # the namespace's credits are shared: nobody goes
    stats = pacer.stats()
    assert stats.rate == 200 and stats.window == 8 and stats.throttled == 1
    # The other requests sent before the decrease are throttled in the same event: no further decrease.
    for _ in range(3):
        pacer.release(10, 0, throttled=True, hint=2.0, sent=sent)
    assert pacer.stats().rate == 200 and pacer.stats().window == 8
    assert pacer.stats().held_seconds == pytest.approx(2.0)


def throttle_once(pacer: Pacer, clock: Clock) -> None:
    """One request throttled (without a wait hint), answered a moment after it went."""
    assert pacer.try_acquire(10) == 0.0
    sent = clock.now
    clock.now += 0.001
    pacer.release(10, 0, throttled=True, sent=sent)


def rate_after(pacer: Pacer, clock: Clock, seconds: float) -> float:
    clock.now += seconds
    pacer.try_acquire(0)
    rate = pacer.stats().rate
    assert rate is not None
    return rate


def test_after_an_isolated_throttling_the_rate_returns_to_the_budget_within_seconds():
    clock = Clock()
    pacer = Pacer(budget=400, clock=clock)
    throttle_once(pacer, clock)
    assert pacer.stats().rate == 200
    # At least half the gap back in a half-life: far more than the linear growth alone brings.
    assert rate_after(pacer, clock, RECOVERY_HALF_LIFE) >= 300
    assert rate_after(pacer, clock, 4 * RECOVERY_HALF_LIFE) == 400  # never above the budget


def test_when_throttling_recurs_the_rate_grows_back_only_linearly():
    clock = Clock()
    pacer = Pacer(budget=400, clock=clock)
    throttle_once(pacer, clock)
    clock.now += RECURRING / 2
    throttle_once(pacer, clock)  # the others' load stays high
    after_second = pacer.stats().rate
    assert after_second == 200  # it was back at the budget, and is halved again
    assert rate_after(pacer, clock, 5) == pytest.approx(after_second + 5 * INCREASE_PER_SECOND * 400)
    assert rate_after(pacer, clock, 60) == 400
    # Long after, an event is isolated again.
    throttle_once(pacer, clock)
    assert rate_after(pacer, clock, 4 * RECOVERY_HALF_LIFE) == 400


def test_repeated_throttling_reaches_a_floor_of_one_management_operation_a_second():
    clock = Clock()
    pacer = Pacer(budget=400, clock=clock)
    for _ in range(20):
        send(pacer, clock, 10, throttled=True)
        clock.now += 0.001
    assert pacer.stats().rate == 10


def test_the_window_grows_back_by_one_per_window_of_answers():
    clock = Clock()
    pacer = Pacer(window=8, clock=clock)
    send(pacer, clock, 0, throttled=True)
    assert pacer.stats().window == 4
    for _ in range(5):
        send(pacer, clock, 0)
    assert pacer.stats().window == 5


def test_effective_rate_counts_the_last_seconds():
    clock = Clock()
    pacer = Pacer(budget=200, clock=clock)
    for _ in range(100):
        send(pacer, clock, 10)
    stats = pacer.stats()
    assert stats.recent_credits_per_second == pytest.approx(200, rel=0.05)
    assert stats.requests == 100 and stats.credits == 1000
