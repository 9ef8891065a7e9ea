"""The life of the engine's connection: connecting (directly, with TLS when the transport asks for it,
or through a WebSocket tunnel), whether it opened, the generation that tells a current connection's
events from a dropped one's, and what a connection that ended or never opened means for requests.

A first connection that never opens fails for a classified reason (``reach``: host not found,
refused, not AMQP, TLS, open timeout) that every later request gets at once, without reconnecting:
another try would fail the same way (``fatal``). Runs on the engine's loop thread only.
"""

from __future__ import annotations

import logging
import ssl
import time
from typing import Any

import proton
from proton import Condition, SSLDomain
from proton.reactor import Container

from reconciler.amqp.websocket import Tunnel
from reconciler.namespace import reach
from reconciler.namespace.connection import Transport
from reconciler.namespace.errors import ConnectFailed, ConnectionLostError, ManagementError
from reconciler.namespace.network import Network

log = logging.getLogger("reconciler.amqp")


def client_ssl_domain(ca_file: str | None = None) -> SSLDomain:
    """TLS client settings: certificate chain and host name verified against trusted CAs."""
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    paths = ssl.get_default_verify_paths()
    trusted = ca_file or paths.cafile or paths.openssl_cafile
    if trusted:
        domain.set_trusted_ca_db(trusted)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, trusted)
    return domain


def condition_text(condition: Condition | None) -> str:
    if condition is None:
        return "no reason given"
    return f"{condition.name}: {condition.description}" if condition.description else str(condition.name)


class Connector:
    """One connection at a time to ``transport``; ``connect_timeout``: how long it may take to open."""

    def __init__(self, transport: Transport, network: Network, container: Container, connect_timeout: float) -> None:
        self.transport = transport
        self._network = network
        self._container = container
        self.connect_timeout = connect_timeout
        self.connection: proton.Connection | None = None
        #: The WebSocket tunnel of the current connection (AMQP over WebSockets only).
        self.tunnel: Tunnel | None = None
        self.generation = 0
        self.opened = False
        self.ever_opened = False
        #: Why the first connection could not be made; every later request fails with it at once.
        self.fatal: ConnectFailed | None = None
        self._started = 0.0

    @property
    def where(self) -> str:
        return reach.host_port(self.transport.host, self.transport.port)

    def connect(self) -> proton.Connection | ConnectFailed:
        """Start connecting: the new connection, or why not (the host name does not even resolve)."""
        self.generation += 1
        transport = self.transport
        kwargs: dict[str, Any] = {
            "reconnect": False,
            "sasl_enabled": True,
            "allowed_mechs": "ANONYMOUS",
            "virtual_host": transport.host,
        }
        url = transport.url
        if transport.websockets:  # proton does plain AMQP over the tunnel, which does TLS (and the proxy)
            self.tunnel = Tunnel(transport, self._network, self.connect_timeout)
            url = f"amqp://{self.where}"
        else:
            try:
                reach.resolve(transport.host, transport.port)  # proton's own lookup would raise inside its loop
            except ConnectFailed as exc:
                return exc
            if transport.tls:
                kwargs["ssl_domain"] = client_ssl_domain(self._network.ca_file)
        log.debug("connecting to %s", transport.url)
        connection = self.connection = self._container.connect(url=url, **kwargs)
        if self.tunnel is not None:
            connection._acceptor = self.tunnel  # connected already: proton must not connect out
        connection._sbrules_generation = self.generation
        self.opened = False
        self._started = time.monotonic()
        return connection

    def current(self, connection: proton.Connection | None) -> bool:
        """proton re-wraps objects per event, so identity is tracked with an attached attribute."""
        generation = getattr(connection, "_sbrules_generation", None) if connection is not None else None
        return self.connection is not None and generation == self.generation

    def on_open(self) -> None:
        self.opened = self.ever_opened = True

    def timed_out(self, generation: int) -> ConnectFailed | None:
        """Why connection ``generation`` failed, if it is still current and has not opened in time: a
        peer that accepts TCP but never opens AMQP must not hold requests forever."""
        if generation == self.generation and self.connection is not None and not self.opened:
            return reach.open_timeout(self.where, time.monotonic() - self._started)
        return None

    def failed(self, failure: ConnectFailed) -> ManagementError:
        """What requests fail with when a connection could not be made. Before any connection ever
        opened, that is the answer for every request to come; after, it is a dropped connection, retried."""
        if self.ever_opened:
            return ConnectionLostError(f"reconnecting to {self.transport.url} failed: {failure}")
        self.fatal = failure
        log.debug("cannot connect: %s", failure)
        return failure

    def lost(self, reason: str) -> ConnectionLostError:
        """An open connection dropped: every request in flight may be retried on a new one."""
        return ConnectionLostError(f"connection to {self.transport.url} lost: {reason}")

    def ended(self, condition: Condition | None, default: str) -> ManagementError:
        """The transport ended: a dropped connection if it had opened, else a classified failure."""
        if self.opened:
            return self.lost(condition_text(condition) if condition is not None else default)
        if self.tunnel is not None and self.tunnel.failure is not None:  # the WebSocket connection never opened
            return self.failed(self.tunnel.failure)
        name = str(condition.name) if condition is not None else None
        description = condition.description if condition is not None else None
        return self.failed(reach.from_transport_condition(name, description, self.where, tls=self.transport.tls))

    def discard(self) -> None:
        """Close the connection and its tunnel; events of theirs are no longer current."""
        connection, self.connection = self.connection, None
        tunnel, self.tunnel = self.tunnel, None
        self.generation += 1
        if connection is not None and connection.state & proton.Endpoint.LOCAL_ACTIVE:
            connection.close()
        if tunnel is not None:
            tunnel.close()
