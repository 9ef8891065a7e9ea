"""The one way to make a namespace's clients: the AMQP and the REST client share one network, one
pacer and its credit budget, and the budget is dropped when the namespace turns out to be Premium.

The command line builds its clients here (``reconciler.cli.common.Namespace`` only turns options
into these arguments), and so do the demo and library users.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

from reconciler.namespace.credits import credit_budget
from reconciler.namespace.network import DIRECT, Network
from reconciler.namespace.pacing import Pacer
from reconciler.namespace.retry import RetryPolicy

if TYPE_CHECKING:
    from reconciler.amqp.client import ManagementClient
    from reconciler.rest.client import ManagementRestClient

log = logging.getLogger("reconciler.cli")

#: Seconds the namespace's tier may take to come (the probe's request; ``close`` waits no longer).
TIER_PROBE_TIMEOUT = 10.0


@dataclass
class Clients:
    """The clients of the namespace ``connection_string`` names, authenticated with ``auth`` ("sas"
    or "entra"), reached over ``network``, spending at most ``max_credits`` (else ``credit_share``
    of a Standard namespace's) credits per second between them. ``close`` (or leaving a ``with``)
    waits for the tier probe, for at most ``TIER_PROBE_TIMEOUT``."""

    connection_string: str
    auth: str = "sas"
    timeout: float = 30.0
    max_credits: float | None = None
    credit_share: float | None = None
    #: The management REST API's URL, when not https://<namespace host>.
    management_endpoint: str | None = None
    network: Network = DIRECT
    _pacer: Pacer | None = field(default=None, init=False, repr=False, compare=False)
    _probe: threading.Thread | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def credit_budget(self) -> float:
        """Credits per second these clients may spend."""
        return credit_budget(self.max_credits, self.credit_share)

    def pacer(self, max_rate: float | None = None) -> Pacer:
        """The one pacer of these clients, made at first use (``max_rate``: requests/s).

        A share of a Standard namespace's credits means nothing on Premium, which has none: there
        the budget is dropped, unless ``max_credits`` asked for one explicitly. The tier is read on
        a thread of its own, so that the command's start (imports, connecting) does not wait for
        that request; until the answer comes the budget holds, which is the safe side.
        """
        if self._pacer is None:
            self._pacer = Pacer(max_rate=max_rate, budget=self.credit_budget)
            if self.max_credits is None:
                self._probe = threading.Thread(target=self._unbudget_premium, name="sbrules-tier", daemon=True)
                self._probe.start()
        return self._pacer

    def _unbudget_premium(self) -> None:
        """Drop the pacer's budget when the namespace is Premium. It keeps the budget when the tier cannot be
        read (a key without Manage rights, say): the command's own requests report any real failure.

        The one request goes outside the pacer: queued behind the command's own requests, which the
        budget it may lift is pacing, it would come too late to matter."""
        from reconciler.rest.client import ManagementRestClient

        assert self._pacer is not None
        try:
            with ManagementRestClient(
                self.connection_string, auth=self.auth, timeout=min(self.timeout, TIER_PROBE_TIMEOUT),
                retry=RetryPolicy(retries=0, throttled_retries=0), base_url=self.management_endpoint,
                network=self.network,
            ) as rest:
                tier = rest.namespace_sku()
        except Exception as exc:  # a probe, on a thread of its own: nothing may escape it
            log.debug("the namespace's tier is unknown (%s: %s); keeping the credit budget", type(exc).__name__, exc)
            return
        log.debug("the namespace's tier is %s", tier)
        if tier == "Premium":
            self._pacer.set_budget(None)

    def amqp(self, *, max_rate: float | None = None) -> "ManagementClient":
        """The AMQP client; ``max_rate`` caps the requests per second of the shared pacer (first use only)."""
        from reconciler.amqp.client import ManagementClient

        return ManagementClient(
            self.connection_string, auth=self.auth, timeout=self.timeout, pacer=self.pacer(max_rate), network=self.network,
        )

    def rest(self) -> "ManagementRestClient":
        """The management REST client."""
        from reconciler.rest.client import ManagementRestClient

        return ManagementRestClient(
            self.connection_string, auth=self.auth, timeout=self.timeout, pacer=self.pacer(),
            base_url=self.management_endpoint, network=self.network,
        )

    def close(self) -> None:
        """Wait for the tier probe's answer, for at most ``TIER_PROBE_TIMEOUT``."""
        if self._probe is not None:
            self._probe.join(TIER_PROBE_TIMEOUT)

    def __enter__(self) -> "Clients":
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
