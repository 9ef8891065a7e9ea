"""How sbrules reaches a namespace: plain AMQP or AMQP over WebSockets, an HTTP proxy, a private CA.

Networks that allow only HTTPS on port 443, often through a proxy that re-signs TLS with a company
CA, are why every Azure SDK offers AMQP over WebSockets. ``Network`` is that choice for one command,
shared by its AMQP and REST clients:

- the transport: ``amqp`` (port 5671) or ``websockets`` (``wss://<host>:443/$servicebus/websocket``,
  subprotocol ``AMQPWSB10``), from ``--transport``/``$SBRULES_TRANSPORT`` or the connection string's
  ``TransportType=AmqpWebSockets``;
- the proxy: ``--proxy URL`` or ``$HTTPS_PROXY``/``$https_proxy``, skipped for hosts ``$NO_PROXY``
  names (comma-separated host names or domain suffixes, ``*`` for every host); reached with an
  HTTP CONNECT tunnel, with basic auth from the URL's ``user:password@`` (kept out of every repr
  and message). Plain AMQP cannot go through an HTTP proxy;
- the CAs trusted: ``--ca-file``, else ``$SSL_CERT_FILE``, else ``$REQUESTS_CA_BUNDLE``, else the
  system's; the file is the whole trust store (company bundles carry the public roots too).

Both the WebSocket tunnel and the REST client open connections with ``http_connection``: the
standard library's CONNECT (``set_tunnel``) is the one tunnel code.
"""

from __future__ import annotations

import base64
import http.client
import os
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

TRANSPORTS = ("amqp", "websockets")
PROXY_ENV = ("HTTPS_PROXY", "https_proxy")
NO_PROXY_ENV = ("NO_PROXY", "no_proxy")
CA_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")


class NetworkError(ValueError):
    """A proxy URL or CA file that cannot be used; the message never contains a password."""


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy reached with CONNECT; ``source`` says where it was set (for messages)."""

    host: str
    port: int
    source: str = "--proxy"
    username: str | None = field(default=None, repr=False, compare=False)
    password: str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def parse(cls, text: str, source: str = "--proxy") -> "Proxy":
        """``http://[user:password@]host[:port]`` (no scheme: http); NetworkError otherwise."""
        try:
            url = urllib.parse.urlsplit(text if "://" in text else f"http://{text}")
        except ValueError:  # an unclosed IPv6 bracket, for one; only the host part is shown (never a password)
            shown = text.split("://", 1)[-1].rpartition("@")[2].split("/", 1)[0]
            raise NetworkError(
                f"{source}: the proxy URL's host {shown!r} is not valid (http://[user:password@]host:port)"
            ) from None
        if url.scheme.lower() != "http":
            raise NetworkError(f"{source}: the proxy URL must be http:// (sbrules tunnels TLS through it with CONNECT)")
        try:
            host, port = url.hostname, url.port
        except ValueError:
            raise NetworkError(f"{source}: the proxy URL has an invalid port") from None
        if not host:
            raise NetworkError(f"{source}: the proxy URL has no host (http://[user:password@]host:port)")
        username = urllib.parse.unquote(url.username) if url.username else None
        password = urllib.parse.unquote(url.password) if url.password else None
        return cls(host, port or 80, source, username, password)

    @property
    def where(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def headers(self) -> dict[str, str]:
        """The CONNECT request's headers: basic auth when the URL had a user."""
        if self.username is None:
            return {}
        secret = f"{self.username}:{self.password or ''}".encode()
        return {"Proxy-Authorization": "Basic " + base64.b64encode(secret).decode("ascii")}

    def __str__(self) -> str:
        return f"proxy {self.where} ({self.source})"


@dataclass(frozen=True)
class Network:
    """The transport, proxy and trusted CAs of one command's connections."""

    transport: str = "amqp"
    proxy: Proxy | None = None
    ca_file: str | None = None
    no_proxy: str = ""

    @property
    def websockets(self) -> bool:
        return self.transport == "websockets"

    def proxy_for(self, host: str) -> Proxy | None:
        """The proxy to reach ``host`` through, or None when there is none or NO_PROXY names the host."""
        if self.proxy is None:
            return None
        name = host.lower().strip("[]")
        entries = [e.strip().lower() for e in self.no_proxy.split(",") if e.strip()]
        if "*" in entries:
            return None
        for entry in entries:
            suffix = entry.removeprefix("*").lstrip(".")
            if name == suffix or name.endswith("." + suffix):
                return None
        return self.proxy

    def tls_context(self) -> ssl.SSLContext:
        """A verifying client context trusting ``ca_file`` (or the system's CAs)."""
        return ssl.create_default_context(cafile=self.ca_file)


DIRECT = Network()


def resolve(
    *,
    transport: str | None = None,
    transport_type: str | None = None,  # a ConnectionString's (lower case)
    proxy: str | None = None,
    ca_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Network:
    """The network of a command: options first, then the connection string's TransportType, then
    the environment's proxy and CA variables. NetworkError for a bad proxy URL or a missing CA file."""
    env = os.environ if environ is None else environ
    chosen = transport or ("websockets" if transport_type == "amqpwebsockets" else "amqp")
    if chosen not in TRANSPORTS:
        raise NetworkError(f"transport {chosen!r} is not one of {', '.join(TRANSPORTS)}")
    parsed: Proxy | None = None
    if proxy:
        parsed = Proxy.parse(proxy)
    else:
        for name in PROXY_ENV:
            if env.get(name):
                parsed = Proxy.parse(env[name], f"${name}")
                break
    no_proxy = next((env[name] for name in NO_PROXY_ENV if env.get(name)), "")
    trusted, source = ca_file, "--ca-file"
    if not trusted:
        source = next((f"${name}" for name in CA_ENV if env.get(name)), "")
        trusted = env.get(source[1:]) if source else None
    if trusted and not os.path.isfile(trusted):
        raise NetworkError(f"{source}: CA file {trusted!r} does not exist or is not a file")
    return Network(chosen, parsed, trusted or None, no_proxy)


def http_connection(
    host: str, port: int, *, tls: ssl.SSLContext | None, proxy: Proxy | None, timeout: float
) -> http.client.HTTPConnection:
    """An unconnected HTTP(S) connection to ``host:port``, tunnelled through ``proxy`` with CONNECT
    when one is given (TLS then runs inside the tunnel, verified against ``host``)."""
    if proxy is None:
        if tls is not None:
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=tls)
        return http.client.HTTPConnection(host, port, timeout=timeout)
    connection: http.client.HTTPConnection
    if tls is not None:
        connection = http.client.HTTPSConnection(proxy.host, proxy.port, timeout=timeout, context=tls)
    else:
        connection = http.client.HTTPConnection(proxy.host, proxy.port, timeout=timeout)
    connection.set_tunnel(host, port, headers=proxy.headers())
    return connection
