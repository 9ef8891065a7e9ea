"""Pacing: when the next request to a namespace may go. One pacer per namespace, shared by every thread
and by the AMQP and REST clients of a command.

It holds four limits:
- the **window**: at most this many requests in flight;
- a **request rate** (requests/s), when one is asked for (``--max-rate``);
- a **credit budget** (credits/s), on a Standard namespace: each request is charged what the
  service will charge it (``reconciler.namespace.credits``), a peek per message it returns;
- a **hold**: when the service answers server-busy with a wait hint ("Please wait 2 seconds"),
  nothing is sent to the namespace until that time has passed, since its credits are shared by
  every request we would send meanwhile.

Throttling is the service's only signal that the namespace's credits ran out, whoever spent them,
and it is binary: throttled or not. Against such a signal, with the other clients' load unknown,
additive increase / multiplicative decrease is the scheme that converges to an efficient and fair
share (Chiu and Jain, 1989; TCP's congestion avoidance). So on throttling the credit rate and the
window are halved, once per congestion event (a request sent before the last decrease does not
decrease again), and they grow back linearly while nothing is throttled: the rate by 5 % of the
budget per second, the window by one per window's worth of answers. The budget caps the rate, so
with no one else on the namespace it is used fully, and over time never exceeded; within any one
second the spend may pass it by the burst (below) plus one request (250-message peeks at a budget
of 250 credits/s: up to twice the budget in one second, never more on average).

One refinement, TCP's fast recovery in spirit: an *isolated* event (none in the ``RECURRING``
seconds before it) is a burst by another client, over within the second in which it exhausted the
namespace's credits; after it the rate returns quickly to where it was, closing half the gap every
second, instead of taking ten seconds at 5 % of the budget per second. Events that recur within
``RECURRING`` seconds mean the others' load stays high, and then the linear growth alone applies, so
sbrules settles below what they leave, as plain AIMD does.

Rates are enforced by virtual scheduling (the generic cell-rate algorithm): each request moves a
theoretical arrival time on by its cost over the rate, and may go when that time is at most
``burst`` seconds ahead of now, so requests of any size (a 250-message peek) are paced alike. Every
decision reads ``clock``, so tests drive the pacer with a clock of their own.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from reconciler.namespace.credits import MANAGEMENT_CREDITS

#: The credit rate grows back by this share of the budget per second without throttling.
INCREASE_PER_SECOND = 0.05
#: A congestion event this many seconds or less after the previous one is a recurring one.
RECURRING = 10.0
#: After an isolated event, the gap between the credit rate and the rate it struck at halves every
#: this many seconds (on top of the linear growth).
RECOVERY_HALF_LIFE = 1.0
#: Seconds of the credit rate that may go at once.
BURST_SECONDS = 0.1
#: The effective rate is measured over this many recent seconds.
RATE_SPAN = 5.0

INFINITY = float("inf")


@dataclass(frozen=True)
class PacingStats:
    """What the pacer has let through so far, for the journal and the progress bar."""

    requests: int
    credits: float
    throttled: int
    held_seconds: float
    window: int
    rate: float | None  # credits/s allowed now (None: no budget)
    budget: float | None
    recent_credits_per_second: float
    recent_requests_per_second: float

    def to_json(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "credits": round(self.credits),
            "throttled": self.throttled,
            "held_s": round(self.held_seconds, 3),
            "window": self.window,
            "credit_rate": None if self.rate is None else round(self.rate, 1),
            "credit_budget": self.budget,
        }


class Pacer:
    """Decides when each request may go; thread-safe."""

    def __init__(
        self,
        *,
        window: int = 64,
        max_rate: float | None = None,
        budget: float | None = None,
        burst: float = BURST_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window < 1:
            raise ValueError("the window must be at least 1")
        self.clock = clock
        self.max_window = window
        self.budget = budget
        self._window = float(window)
        self._request_interval = 1.0 / max_rate if max_rate else 0.0
        self._rate = budget
        self._floor = min(budget, MANAGEMENT_CREDITS) if budget else None
        self._recover_to: float | None = None  # the rate an isolated event struck at, until regained
        self._burst = burst
        self._lock = threading.Condition()
        self._in_flight = 0
        self._request_tat = 0.0  # theoretical arrival time of the next request (request rate)
        self._credit_tat = 0.0  # the same for credits (credit rate)
        self._hold_until = 0.0
        self._held = 0.0
        self._last_decrease = -INFINITY
        self._last_increase = clock()
        self._requests = 0
        self._credits = 0.0
        self._throttled = 0
        self._recent: deque[tuple[float, float]] = deque()  # (answer time, credits charged)

    def __repr__(self) -> str:
        return f"Pacer(window={self.max_window}, budget={self.budget})"

    # -- decisions --------------------------------------------------------------------------------
    def try_acquire(self, credits: float = 0.0) -> float:
        """Take a slot for a request costing ``credits`` and return 0.0, or return how many seconds
        to wait before asking again (``inf``: the window is full, wait for an answer)."""
        with self._lock:
            return self._try(credits, self.clock())

    def acquire(self, credits: float, slot_timeout: float) -> bool:
        """Block until the request may go and take its slot; False when no window slot freed within
        ``slot_timeout`` seconds (waiting for the rate or a hold has no limit: it always ends)."""
        deadline = self.clock() + slot_timeout
        with self._lock:
            while True:
                now = self.clock()
                delay = self._try(credits, now)
                if delay == 0.0:
                    return True
                if delay == INFINITY:
                    if now >= deadline:
                        return False
                    delay = deadline - now
                self._lock.wait(delay)

    def release(
        self, reserved: float, charged: float, *, throttled: bool = False, hint: float | None = None,
        sent: float | None = None,
    ) -> None:
        """An answer came (or the request was given up): free its slot and learn from it.

        ``reserved`` is what ``try_acquire`` charged, ``charged`` what the service took; ``sent`` is
        when the request went (a throttled answer to a request sent before the last decrease belongs
        to the congestion event already reacted to).
        """
        with self._lock:
            now = self.clock()
            self._in_flight -= 1
            self._credits += charged
            self._recent.append((now, charged))
            if self._rate and reserved != charged:
                self._credit_tat -= (reserved - charged) / self._rate
            if throttled:
                self._throttled += 1
                if hint:
                    until = now + hint
                    if until > self._hold_until:
                        self._held += until - max(now, self._hold_until)
                        self._hold_until = until
                if sent is None or sent >= self._last_decrease:
                    self._decrease(now)
            elif self._window < self.max_window:
                self._window = min(float(self.max_window), self._window + 1.0 / self._window)
            self._lock.notify_all()

    def set_budget(self, budget: float | None) -> None:
        """Spend at most ``budget`` credits/s from now on (None: credits do not pace, as on Premium)."""
        with self._lock:
            self.budget = budget
            self._rate = budget
            self._recover_to = None
            self._floor = min(budget, MANAGEMENT_CREDITS) if budget else None
            self._lock.notify_all()

    def stats(self) -> PacingStats:
        with self._lock:
            now = self.clock()
            while self._recent and self._recent[0][0] < now - RATE_SPAN:
                self._recent.popleft()
            span = min(RATE_SPAN, max(now - self._recent[0][0], 1e-3)) if self._recent else 1.0
            return PacingStats(
                requests=self._requests,
                credits=self._credits,
                throttled=self._throttled,
                held_seconds=self._held,
                window=int(self._window),
                rate=self._rate,
                budget=self.budget,
                recent_credits_per_second=sum(c for _, c in self._recent) / span,
                recent_requests_per_second=len(self._recent) / span,
            )

    # -- under the lock ---------------------------------------------------------------------------
    def _try(self, credits: float, now: float) -> float:
        self._increase(now)
        if now < self._hold_until:
            return self._hold_until - now
        if self._in_flight >= int(self._window):
            return INFINITY
        wait = self._request_tat - now if self._request_interval else 0.0
        if self._rate and credits:
            wait = max(wait, self._credit_tat - self._burst - now)
        if wait > 0:
            return wait
        self._in_flight += 1
        self._requests += 1
        if self._request_interval:
            self._request_tat = max(self._request_tat, now) + self._request_interval
        if self._rate and credits:
            self._credit_tat = max(self._credit_tat, now) + credits / self._rate
        return 0.0

    def _decrease(self, now: float) -> None:
        isolated = now - self._last_decrease > RECURRING
        self._last_decrease = now
        self._window = max(1.0, self._window / 2)
        if self._rate is not None and self._floor is not None:
            self._recover_to = self._rate if isolated else None
            self._rate = max(self._floor, self._rate / 2)

    def _increase(self, now: float) -> None:
        """Growth of the credit rate for the time since the last look that was neither held nor right
        after a decrease: linear, and after an isolated event also half the way back per half-life."""
        since = max(self._last_increase, self._hold_until, self._last_decrease)
        rate, budget, target = self._rate, self.budget, self._recover_to
        if rate is not None and budget is not None and now > since and rate < budget:
            elapsed = now - since
            if target is not None and rate < target:
                rate = target - (target - rate) * 0.5 ** (elapsed / RECOVERY_HALF_LIFE)
            self._rate = min(budget, rate + INCREASE_PER_SECOND * budget * elapsed)
        self._last_increase = max(self._last_increase, now)
