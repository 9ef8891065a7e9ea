"""Service Bus connection strings and the transport they allow.

Keys are case-insensitive ``Key=Value`` pairs separated by ``;`` (as in the .NET SDK). Secrets
never leave this object in text form: ``repr``/``str`` redact them and error messages name keys,
never values. Transport: TLS (``amqps``, port 5671, certificate and host name verified) for every
endpoint; plain AMQP only when ``UseDevelopmentEmulator=true`` and the host is loopback. Over
WebSockets the same rule holds: ``wss`` (port 443) everywhere, plain ``ws`` for the emulator only.
An Endpoint's explicit port is used by either transport.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from dataclasses import dataclass, field

from reconciler.errors import ErrorCode, SbrulesError

TLS_PORT = 5671
PLAIN_PORT = 5672
WEBSOCKET_PORT = 443
WEBSOCKET_PATH = "/$servicebus/websocket"

_KEYS = {
    "endpoint": "endpoint",
    "entitypath": "entity_path",
    "sharedaccesskeyname": "key_name",
    "sharedaccesskey": "key",
    "sharedaccesssignature": "signature",
    "usedevelopmentemulator": "use_emulator",
    "transporttype": "transport_type",
}
#: TransportType values (the .NET SDK's spelling, any case).
TRANSPORT_TYPES = ("amqp", "amqpwebsockets")


class ConnectionStringError(SbrulesError):
    """A connection string that cannot be used; the message never contains secret values."""

    code = ErrorCode.INPUT


class TransportRefused(SbrulesError):
    """The endpoint would need an insecure transport the rules do not allow."""

    code = ErrorCode.INPUT


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP address (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Transport:
    """Where and how to connect: ``scheme`` is ``amqps`` (TLS, verified) or ``amqp`` (emulator), or
    for AMQP over WebSockets ``wss`` or ``ws`` (emulator)."""

    scheme: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.scheme in ("amqps", "wss")

    @property
    def websockets(self) -> bool:
        return self.scheme in ("wss", "ws")

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{WEBSOCKET_PATH if self.websockets else ''}"


@dataclass(frozen=True)
class ConnectionString:
    """A parsed connection string. Secrets are excluded from repr and equality."""

    host: str
    port: int | None = None
    entity_path: str | None = None
    key_name: str | None = None
    key: str | None = field(default=None, repr=False, compare=False)
    signature: str | None = field(default=None, repr=False, compare=False)
    use_emulator: bool = False
    #: TransportType, lower case (``amqp`` or ``amqpwebsockets``), when the connection string sets it.
    transport_type: str | None = None

    @classmethod
    def parse(cls, text: str) -> "ConnectionString":
        """Parse ``text``; raises ConnectionStringError naming the offending key or segment."""
        if not isinstance(text, str) or not text.strip():
            raise ConnectionStringError("the connection string is empty")
        values: dict[str, str] = {}
        for index, segment in enumerate(text.split(";"), start=1):
            if not segment.strip():
                continue
            key, sep, value = segment.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConnectionStringError(f"connection string segment {index} is not Key=Value")
            attr = _KEYS.get(key.lower())
            if attr is None:
                continue  # other SDK settings do not concern us
            value = value.strip()
            if not value:
                raise ConnectionStringError(f"connection string key {key} has an empty value")
            if attr in values:
                raise ConnectionStringError(f"connection string key {key} is given twice")
            values[attr] = value
        if "endpoint" not in values:
            raise ConnectionStringError("connection string has no Endpoint (Endpoint=sb://<namespace>.servicebus.windows.net/)")
        host, port = _parse_endpoint(values.pop("endpoint"))
        emulator_text = values.pop("use_emulator", "false").lower()
        if emulator_text not in ("true", "false"):
            raise ConnectionStringError("UseDevelopmentEmulator must be true or false")
        if "signature" in values and ("key_name" in values or "key" in values):
            raise ConnectionStringError(
                "use either SharedAccessSignature or SharedAccessKeyName/SharedAccessKey, not both"
            )
        if ("key_name" in values) != ("key" in values):
            missing = "SharedAccessKey" if "key_name" in values else "SharedAccessKeyName"
            raise ConnectionStringError(f"connection string has no {missing} (both key name and key are needed)")
        if "signature" in values and not values["signature"].startswith("SharedAccessSignature "):
            raise ConnectionStringError("SharedAccessSignature must start with 'SharedAccessSignature sr='")
        transport_type = values.pop("transport_type", None)
        if transport_type is not None and transport_type.lower() not in TRANSPORT_TYPES:
            raise ConnectionStringError("TransportType must be Amqp or AmqpWebSockets")
        entity = values.pop("entity_path", None)
        return cls(
            transport_type=transport_type.lower() if transport_type else None,
            host=host,
            port=port,
            entity_path=entity.strip("/") if entity else None,
            use_emulator=emulator_text == "true",
            **values,
        )

    @property
    def endpoint(self) -> str:
        """``sb://host[:port]/`` (the scheme is always sb, as in the SDKs)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"sb://{host}{f':{self.port}' if self.port else ''}/"

    def audience(self, entity: str) -> str:
        """The CBS audience of ``entity``, e.g. ``sb://ns/topic/Subscriptions/s/$management`` (NET2:
        the endpoint URI, custom port kept, joined with the entity path)."""
        return f"{self.endpoint}{entity.strip('/')}"

    def transport(self, websockets: bool = False) -> Transport:
        """TLS for every endpoint; plain AMQP only for the development emulator on loopback.
        ``websockets``: the same over WebSockets (``wss``, port 443 unless the Endpoint names one)."""
        if self.use_emulator:
            if not is_loopback(self.host):
                raise TransportRefused(
                    f"UseDevelopmentEmulator=true is only allowed for a loopback host, not {self.host!r}: "
                    "remote endpoints always use TLS"
                )
            return Transport("ws" if websockets else "amqp", self.host, self.port or PLAIN_PORT)
        if websockets:
            return Transport("wss", self.host, self.port or WEBSOCKET_PORT)
        return Transport("amqps", self.host, self.port or TLS_PORT)

    def __str__(self) -> str:
        auth = "SharedAccessKey=***" if self.key else "SharedAccessSignature=***" if self.signature else "no credentials"
        parts = [f"Endpoint={self.endpoint}"]
        if self.key_name:
            parts.append(f"SharedAccessKeyName={self.key_name}")
        parts.append(auth)
        if self.entity_path:
            parts.append(f"EntityPath={self.entity_path}")
        if self.use_emulator:
            parts.append("UseDevelopmentEmulator=true")
        if self.transport_type == "amqpwebsockets":
            parts.append("TransportType=AmqpWebSockets")
        return ";".join(parts)


#: Endpoint schemes a connection string may use: ``sb`` (as the portal writes it) or an AMQP one.
ENDPOINT_SCHEMES = ("sb", "amqps", "amqp")


def _parse_endpoint(text: str) -> tuple[str, int | None]:
    parsed = urllib.parse.urlsplit(text if "://" in text else f"sb://{text}")
    if parsed.scheme.lower() not in ENDPOINT_SCHEMES:
        raise ConnectionStringError(
            f"Endpoint scheme {parsed.scheme}:// is not a Service Bus endpoint: write "
            "Endpoint=sb://<namespace>.servicebus.windows.net/ (or amqps://)"
        )
    try:
        host, port = parsed.hostname, parsed.port
    except ValueError:
        raise ConnectionStringError("Endpoint has an invalid port") from None
    if not host:
        raise ConnectionStringError("Endpoint has no host name (expected sb://<namespace>.servicebus.windows.net/)")
    if parsed.username or parsed.password:
        raise ConnectionStringError("Endpoint must not contain user information")
    return host, port
