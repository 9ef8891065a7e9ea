"""The retry policy: which failures are retried, how often, and how long to wait between tries.

Only errors marked ``transient`` (busy, timeouts, internal errors, dropped connections) are
retried. A throttled request (server busy) is retried after the wait the service asks for
("Please wait 2 seconds and try again"); throttling is the service working as designed, not a
failure, so it has an allowance of its own (``throttled_retries``), larger than the one for other
transient failures (``retries``). Without a hint the wait is capped exponential backoff with full
jitter (uniform in [0, min(cap, base * 2^(n-1))]), so clients that failed together do not retry
together. The request pipeline applies this one policy to every AMQP and REST request.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from reconciler.namespace.errors import ManagementError, ServerBusyError


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` further attempts after failures other than throttling, ``throttled_retries`` after
    throttled ones; backoff waits grow from ``backoff`` up to ``max_backoff`` seconds."""

    retries: int = 5
    backoff: float = 0.2
    max_backoff: float = 10.0
    throttled_retries: int = 20

    def next_delay(self, exc: ManagementError, attempts: int, throttled: int) -> float | None:
        """Seconds to wait before trying again after ``exc``, or None when it is not tried again.

        ``attempts`` is how many attempts were made so far, ``throttled`` how many of them were
        throttled (this one included).
        """
        if not exc.transient:
            return None
        if isinstance(exc, ServerBusyError):
            if throttled > self.throttled_retries:
                return None
            return exc.retry_after if exc.retry_after is not None else self.backoff_delay(throttled)
        failures = attempts - throttled
        if failures > self.retries:
            return None
        return self.backoff_delay(failures)

    def attempts(self, exc: ManagementError) -> int:
        """How many attempts, at most, a call failing as ``exc`` gets."""
        return 1 + (self.throttled_retries if isinstance(exc, ServerBusyError) else self.retries)

    def backoff_delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure (1-based), without a hint from the service."""
        return random.uniform(0, min(self.max_backoff, self.backoff * 2 ** (failures - 1)))
