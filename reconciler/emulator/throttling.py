"""Credit-based throttling of a Standard namespace, as the emulator models it (``--throttle standard``).

One meter per namespace, charged for the work of every client: management requests, sends (per
message and per filter evaluation), receives and the REST API, at the prices of
``reconciler.namespace.credits`` unless the faults say otherwise. The service's accounting is by the second:
each second starts with ``credits_per_second`` credits; a request is admitted while the second's
credits are not spent and is then charged its full cost, and once they are spent every request is
refused with server-busy until the next second. A large request admitted with few credits left (a
250-message peek) overdraws, and the next seconds pay the overdraft, so over any stretch of time the
namespace does no more work than its credits buy, whoever asks.

The meter reads its settings from ``Faults`` at each request, so a test can switch throttling on
and off with clients connected, and its time from ``clock``, so a test can move the seconds on.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Callable

from reconciler.emulator.faults import Faults
from reconciler.namespace.credits import CreditCosts, throttled_description


@dataclass(frozen=True)
class MeterStats:
    """What the namespace has admitted, charged and refused so far."""

    admitted: int
    throttled: int
    credits: int


class CreditMeter:
    """The namespace's credits; thread-safe (the AMQP loop and the REST API's threads share it)."""

    def __init__(self, faults: Faults, clock: Callable[[], float] = time.monotonic) -> None:
        self.faults = faults
        self.clock = clock
        self._lock = threading.Lock()
        self._second: float | None = None
        self._balance = 0.0
        self._admitted = 0
        self._throttled = 0
        self._credits = 0

    @property
    def on(self) -> bool:
        return self.faults.credits_per_second is not None

    @property
    def costs(self) -> CreditCosts:
        return self.faults.costs

    def admit(self) -> bool:
        """Whether a request may run now: True while this second's credits are not spent (always,
        when throttling is off). A refused request costs nothing and is counted as throttled."""
        rate = self.faults.credits_per_second
        if rate is None:
            return True
        with self._lock:
            self._refill(rate)
            if self._balance > 0:
                self._admitted += 1
                return True
            self._throttled += 1
            return False

    def available(self) -> bool:
        """Whether credits remain this second, without counting a request (message delivery asks)."""
        rate = self.faults.credits_per_second
        if rate is None:
            return True
        with self._lock:
            self._refill(rate)
            return self._balance > 0

    def charge(self, credits: int) -> None:
        """An admitted operation is done: take what it cost."""
        rate = self.faults.credits_per_second
        if rate is None or credits <= 0:
            return
        with self._lock:
            self._refill(rate)
            self._balance -= credits
            self._credits += credits

    def refusal(self) -> str:
        """The service's description of a throttled request, with the wait it asks for."""
        return throttled_description(self.faults.throttled_wait_seconds)

    def stats(self) -> MeterStats:
        with self._lock:
            return MeterStats(self._admitted, self._throttled, self._credits)

    def _refill(self, rate: float) -> None:
        """At each new second its credits arrive; an overdraft is paid from them first."""
        second = math.floor(self.clock())
        if self._second is None:
            self._second, self._balance = second, rate
        elif second > self._second:
            self._balance = min(self._balance + rate * (second - self._second), rate)
            self._second = second
