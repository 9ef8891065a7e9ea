"""The retry policy: which failures are retried, how often, and how long to wait between tries.

Capped exponential backoff with full jitter (each wait is uniform in [0, min(cap, base * 2^(n-1))]),
so clients that failed together do not retry together. Only errors marked ``transient`` (busy,
timeouts, internal errors, dropped connections) are retried. The AMQP management client and the
management REST client both use this one policy.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from reconciler.amqp.errors import ManagementError


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` further attempts after the first, waits growing from ``backoff`` up to ``max_backoff``."""

    retries: int = 5
    backoff: float = 0.2
    max_backoff: float = 10.0

    def retryable(self, exc: ManagementError, attempt: int) -> bool:
        """Whether attempt number ``attempt`` (1-based), which failed with ``exc``, may be tried again."""
        return exc.transient and attempt <= self.retries

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return random.uniform(0, min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))
