"""Why the namespace could not be reached: one classification for the AMQP engine and the REST client.

A connection that never got as far as talking to Service Bus fails for a reason a person can act
on, and the same reason deserves the same words whichever protocol met it: the host name does not
resolve, nothing listens on the port, something answers that is not Service Bus, TLS verification
fails, or the peer accepts the connection and then says nothing. Each becomes a ``ConnectFailed``
subclass (``reconciler.namespace.errors``), which is never retried and which commands report once.

The AMQP engine learns of a failure as proton's transport condition (text); the REST client as an
exception chain from ``http.client`` down to the ``OSError``. Both end here.
"""

from __future__ import annotations

import re
import socket
import ssl
from typing import TYPE_CHECKING, Iterator

from reconciler.namespace.errors import (
    ConnectFailed,
    EndpointRefusedError,
    HostNotFoundError,
    NotServiceBusError,
    OpenTimeoutError,
    TransportSecurityError,
)

if TYPE_CHECKING:
    from reconciler.namespace.network import Proxy

#: How much of an unexpected answer to quote.
_QUOTE = 60
#: proton quotes the bytes it got instead of a protocol header: ``… Unknown protocol ['HTTP/1.1 …']``.
_GOT = re.compile(r"\['(?P<got>.*)'\]", re.DOTALL)


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def resolve(host: str, port: int) -> None:
    """Look ``host`` up as a connection would; HostNotFoundError when it does not resolve."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise host_not_found(host, exc) from None
    except UnicodeError:
        raise host_not_found(host, "not a valid host name") from None


def host_not_found(host: str, detail: object) -> HostNotFoundError:
    reason = detail.strerror if isinstance(detail, socket.gaierror) and detail.strerror else str(detail)
    return HostNotFoundError(
        f"cannot resolve host {host!r} ({reason}): check the namespace name in the connection string's "
        "Endpoint (sb://<namespace>.servicebus.windows.net/)"
    )


def refused(where: str) -> EndpointRefusedError:
    return EndpointRefusedError(
        f"{where} refused the connection: nothing listens on that port (check the Endpoint's host and port; "
        "for the emulator, is `sbrules emulator` running?)"
    )


def tls_failed(where: str, reason: str) -> TransportSecurityError:
    return TransportSecurityError(
        f"TLS with {where} failed: {reason}; sbrules verifies the certificate and the host name and never "
        "falls back to an unencrypted connection"
    )


def not_amqp(where: str, answered: str | None) -> NotServiceBusError:
    """Something at ``where`` answered the AMQP protocol header with ``answered`` (None: it closed)."""
    if answered is None:
        return NotServiceBusError(
            f"{where} closed the connection without answering the AMQP protocol header: it is not a Service Bus "
            "(AMQP) endpoint"
        )
    return NotServiceBusError(
        f"{where} is not a Service Bus (AMQP) endpoint: it answered {_quote(answered)} instead of the AMQP "
        "protocol header"
    )


def not_management_api(url: str, status: int, content_type: str | None) -> NotServiceBusError:
    return NotServiceBusError(
        f"{url} is not the Service Bus management API: it answered HTTP {status} with "
        f"{content_type or 'no content type'} instead of XML"
    )


def not_http(url: str, answered: str) -> NotServiceBusError:
    """Something at ``url`` answered an HTTP request with ``answered``, which is not HTTP."""
    if answered.startswith("AMQP"):
        return NotServiceBusError(
            f"{url} speaks AMQP, not HTTP: it is an AMQP endpoint, not the management REST API (point "
            "--management-endpoint at the namespace's management endpoint)"
        )
    return NotServiceBusError(f"{url} is not the Service Bus management API: it answered {_quote(answered)}, not HTTP")


def open_timeout(where: str, elapsed: float, protocol: str = "AMQP") -> OpenTimeoutError:
    return OpenTimeoutError(
        f"{where} accepted the connection but did not open {protocol} within {elapsed:.1f}s: it is not a "
        "Service Bus endpoint, or a proxy or firewall holds the connection"
    )


def _quote(answered: str) -> str:
    text = answered.encode("latin-1", "backslashreplace").decode("unicode_escape", "replace")
    first = text.strip().splitlines()[0] if text.strip() else text
    return repr(first[:_QUOTE] + ("…" if len(first) > _QUOTE else ""))


# -- AMQP: proton's transport conditions ------------------------------------------------------------


def from_transport_condition(name: str | None, description: str | None, where: str, *, tls: bool) -> ConnectFailed:
    """Why a connection that never opened failed, from proton's transport condition."""
    text = description or ""
    lowered = text.lower()
    if "connection refused" in lowered:
        return refused(where)
    if "name or service not known" in lowered or "nodename nor servname" in lowered or "getaddrinfo" in lowered:
        return host_not_found(where.rsplit(":", 1)[0].strip("[]"), text)
    if tls and ("ssl" in lowered or "certificate" in lowered or "tls" in lowered):
        return tls_failed(where, _ssl_reason(text))
    got = _GOT.search(text)
    if "protocol header" in lowered and got:
        return not_amqp(where, got.group("got"))
    if "protocol header" in lowered or "aborted" in lowered or "disconnected" in lowered or not text:
        return not_amqp(where, None)
    return ConnectFailed(f"cannot connect to {where}: {name + ': ' if name else ''}{text}")


def _ssl_reason(text: str) -> str:
    """The useful end of an OpenSSL error text: ``…::certificate verify failed`` → that phrase."""
    return text.rsplit("::", 1)[-1].strip() or text


# -- REST: exception chains -----------------------------------------------------------------------


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def from_os_error(exc: BaseException, host: str, port: int) -> ConnectFailed | None:
    """The classified failure behind ``exc`` (any wrapper of an OSError), or None when it is not
    one of a connection that could not be made (then it may be transient)."""
    where = host_port(host, port)
    for cause in _chain(exc):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return tls_failed(where, cause.verify_message or cause.reason or str(cause))
        if isinstance(cause, ssl.SSLError):
            return tls_failed(where, cause.reason or str(cause))
        if isinstance(cause, socket.gaierror):
            return host_not_found(host, cause)
        if isinstance(cause, ConnectionRefusedError):
            return refused(where)
    return None


# -- proxies ----------------------------------------------------------------------------------------

#: http.client's words when a proxy answers CONNECT with anything but 200.
_TUNNEL_REFUSED = re.compile(r"Tunnel connection failed: (?P<status>\d+)\s*(?P<reason>.*)")


def through_proxy(exc: BaseException, proxy: Proxy, target: str) -> ConnectFailed | None:
    """Why a connection through an HTTP proxy failed, when the proxy is the reason: it refused the
    TCP connection, does not resolve, or answered CONNECT with an error (407: it wants credentials)."""
    where = f"the proxy {proxy.where} ({proxy.source})"
    for cause in _chain(exc):
        if isinstance(cause, ssl.SSLError):
            return None  # TLS with the target, inside the tunnel: the target's failure
        if isinstance(cause, socket.gaierror):
            reason = cause.strerror or cause
            return HostNotFoundError(f"cannot resolve the host of {where}: {reason}")
        if isinstance(cause, ConnectionRefusedError):
            return EndpointRefusedError(f"{where} refused the connection: nothing listens there")
        match = _TUNNEL_REFUSED.search(str(cause)) if isinstance(cause, OSError) else None
        if match:
            status, reason = match.group("status"), match.group("reason") or "no reason given"
            hint = ""
            if status == "407":
                hint = (
                    ": check the user name and password in the proxy URL" if proxy.username is not None
                    else ": it wants credentials, give them as http://user:password@host:port"
                )
            return EndpointRefusedError(f"{where} refused the tunnel to {target}: HTTP {status} {reason}{hint}")
    return None
