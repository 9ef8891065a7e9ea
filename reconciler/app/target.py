"""The namespace a command works on, made once: where it is (the connection string, parsed once),
how to reach it (the network), how fast (one pacer and its credit budget, dropped when the tier
probe finds a Premium namespace), and both clients built over those.

:class:`TargetOptions` is what a person gave (the command line's namespace options, or a library
caller's arguments); :meth:`TargetOptions.target` resolves an sbrules.yaml environment's namespace
and makes the :class:`Target` every operation takes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import urllib.parse
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Callable

from reconciler.errors import InputError, UsageError
from reconciler.namespace.connection import ConnectionString, is_loopback
from reconciler.namespace.credits import credit_budget
from reconciler.namespace.network import DIRECT, Network, NetworkError, resolve
from reconciler.namespace.pacing import Pacer
from reconciler.namespace.retry import RetryPolicy

if TYPE_CHECKING:
    from reconciler.amqp.client import ManagementClient
    from reconciler.rest.client import ManagementRestClient
    from reconciler.rulefiles.project import Environment

log = logging.getLogger("reconciler.app")

CONNECTION_ENV = "SERVICEBUS_CONNECTION_STRING"
#: Seconds the namespace's tier may take to come (the probe's request; ``close`` waits no longer).
TIER_PROBE_TIMEOUT = 10.0


@dataclass
class Target:
    """The namespace ``connection`` names, authenticated with ``auth`` ("sas" or "entra"), reached
    over ``network``, spending at most ``max_credits`` (else ``credit_share`` of a Standard
    namespace's) credits per second between its clients; ``discovery``: whether plans list what
    exists. ``close`` (or leaving a ``with``) waits for the tier probe, at most ``TIER_PROBE_TIMEOUT``."""

    connection: ConnectionString
    auth: str = "sas"
    timeout: float = 30.0
    max_credits: float | None = None
    credit_share: float | None = None
    #: The management REST API's URL, when not https://<namespace host>.
    management_endpoint: str | None = None
    network: Network = DIRECT
    discovery: bool = True
    _pacer: Pacer | None = field(default=None, init=False, repr=False, compare=False)
    _probe: threading.Thread | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def connect(cls, connection_string: str, **options: object) -> "Target":
        """The target of ``connection_string`` (parsed here, once), with ``Target``'s other fields."""
        return cls(ConnectionString.parse(connection_string), **options)  # type: ignore[arg-type]

    @property
    def address(self) -> str:
        """The namespace's host (and port, when not the default): what a saved plan is tied to."""
        return self.connection.endpoint.removeprefix("sb://").rstrip("/").lower()

    @property
    def credit_budget(self) -> float:
        """Credits per second this target's clients may spend."""
        return credit_budget(self.max_credits, self.credit_share)

    def pacer(self, max_rate: float | None = None) -> Pacer:
        """The one pacer of the clients, made at first use (``max_rate``: requests/s).

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
                self.connection, auth=self.auth, timeout=min(self.timeout, TIER_PROBE_TIMEOUT),
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
            self.connection, auth=self.auth, timeout=self.timeout, pacer=self.pacer(max_rate), network=self.network,
        )

    def rest(self) -> "ManagementRestClient":
        """The management REST client."""
        from reconciler.rest.client import ManagementRestClient

        return ManagementRestClient(
            self.connection, auth=self.auth, timeout=self.timeout, pacer=self.pacer(),
            base_url=self.management_endpoint, network=self.network,
        )

    def close(self) -> None:
        """Wait for the tier probe's answer, for at most ``TIER_PROBE_TIMEOUT``."""
        if self._probe is not None:
            self._probe.join(TIER_PROBE_TIMEOUT)

    def __enter__(self) -> "Target":
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@dataclass(frozen=True)
class TargetOptions:
    """Where to connect, as given: ``--connection-string`` (or $SERVICEBUS_CONNECTION_STRING),
    ``--auth``, ``--timeout``, ``--max-credits``, ``--credit-share``, ``--management-endpoint``,
    ``--transport``, ``--proxy``, ``--ca-file`` and ``--no-discovery``, or a library caller's."""

    connection_string: str | None = field(default=None, repr=False)
    auth: str = "sas"
    timeout: float = 30.0
    #: Whether the connection string or auth was named explicitly (not from the environment).
    explicit: bool = False
    max_credits: float | None = None
    credit_share: float | None = None
    management_endpoint: str | None = None
    discovery: bool = True
    transport: str | None = None
    proxy: str | None = field(default=None, repr=False)
    ca_file: str | None = None

    def without_discovery(self, skip: bool) -> "TargetOptions":
        """These options, with discovery skipped when ``skip`` (--no-discovery)."""
        return dataclasses.replace(self, discovery=False) if skip else self

    def target(
        self, environment: "Environment | None" = None, *, note: Callable[[str], None] = log.warning
    ) -> Target:
        """The target these options name, or ``environment``'s namespace when sbrules.yaml names one;
        ``note`` hears what the person should know (a proxy plain AMQP cannot use). UsageError when
        no connection string is given, or the environment's is missing or clashes with an explicit one."""
        options = self._for_environment(environment)
        connection = ConnectionString.parse(require_connection_string(options.connection_string))
        try:
            network = resolve(
                transport=options.transport, transport_type=connection.transport_type, proxy=options.proxy,
                ca_file=options.ca_file,
            )
        except NetworkError as exc:
            raise UsageError(str(exc)) from None
        proxy = network.proxy_for(connection.host)
        if proxy is not None and not network.websockets:
            note(
                f"plain AMQP (port 5671) cannot go through an HTTP proxy: AMQP connects directly, only the "
                f"management REST API uses the {proxy}; pass --transport websockets to send everything through it"
            )
        return Target(
            connection, options.auth, options.timeout, options.max_credits, options.credit_share,
            management_endpoint=options.management_endpoint, network=network, discovery=options.discovery,
        )

    def _for_environment(self, env: "Environment | None") -> "TargetOptions":
        """The options an sbrules.yaml environment names (its connection string's variable, or its
        endpoint for Entra ID), or these when it names none."""
        if env is None:
            return self
        management_endpoint = self.management_endpoint or _environment_management_url(env)
        if not env.names_namespace:
            return dataclasses.replace(self, management_endpoint=management_endpoint)
        if self.explicit:
            raise UsageError(f"--env {env.name} takes its namespace from sbrules.yaml; drop --connection-string/--auth")
        if env.endpoint:
            return dataclasses.replace(
                self, connection_string=f"Endpoint={env.endpoint}", auth=env.auth or "entra",
                management_endpoint=management_endpoint,
            )
        variable = env.connection_string_env or ""
        value = os.environ.get(variable)
        if not value:  # a missing connection string is a usage error however it was to be given
            raise UsageError(
                f"no connection string: environment {env.name!r} reads it from ${variable}, which is not set "
                "(in Azure Pipelines, map the secret into the step's env)"
            )
        return dataclasses.replace(
            self, connection_string=value, auth=env.auth or "sas", management_endpoint=management_endpoint
        )


def require_connection_string(value: str | None) -> str:
    """The connection string, or a usage error that names both ways to give it."""
    if value:
        return value
    if os.environ.get(CONNECTION_ENV):
        return os.environ[CONNECTION_ENV]
    raise UsageError(f"no connection string: pass --connection-string or set ${CONNECTION_ENV}")


def check_management_url(value: str | None) -> str | None:
    """``value`` when it is an https URL, or plain http to a loopback host (a token never crosses a
    network unencrypted); ValueError otherwise."""
    if value is None:
        return None
    url = urllib.parse.urlsplit(value)
    if url.scheme not in ("https", "http") or not url.hostname:
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    if url.scheme == "http" and not is_loopback(url.hostname):
        raise ValueError(f"{value!r}: plain http is for a loopback host only (an emulator); use https")
    return value


def _environment_management_url(env: "Environment") -> str | None:
    try:
        return check_management_url(env.management_endpoint)
    except ValueError as exc:
        raise InputError(f"environment {env.name!r}: management_endpoint {exc}") from None
