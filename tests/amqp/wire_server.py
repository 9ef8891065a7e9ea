"""A scripted AMQP 1.0 peer for wire-level tests: records every frame-level fact the client sends.

Unlike the emulator (a faithful namespace), this server answers each `$management` request with
whatever ``respond(address, message)`` returns, can drop the connection on chosen requests, and
can serve TLS, so tests can check exact AMQP types, spellings and failure handling.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import proton
from proton import Condition, Message
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, Container, EventInjector

Responder = Callable[[str, Message], tuple[dict[str, Any], Any]]


def ok_empty(address: str, message: Message) -> tuple[dict[str, Any], Any]:
    return {"statusCode": proton.int32(200), "statusDescription": "OK"}, None


@dataclass
class Attach:
    name: str
    role: str  # "sender" or "receiver", from the client's point of view
    address: str | None
    reply_to: str | None
    properties: dict[str, Any]
    snd_settle_mode: int


@dataclass(eq=False)
class WireServer(MessagingHandler):
    respond: Responder = ok_empty
    ssl_domain: proton.SSLDomain | None = None
    cbs_status: int = 202
    #: Drop the connection instead of answering these management requests (1-based count).
    drop_on: set[int] = field(default_factory=set)
    attaches: list[Attach] = field(default_factory=list)
    cbs_requests: list[Message] = field(default_factory=list)
    requests: list[tuple[str, Message]] = field(default_factory=list)
    connections: int = 0

    def __post_init__(self) -> None:
        super().__init__(prefetch=100, auto_accept=True)
        self._replies: dict[str, proton.Sender] = {}
        self._lock = threading.Lock()
        self.port = 0

    def __enter__(self) -> "WireServer":
        self._injector = EventInjector()
        self._container = Container(self)
        self._container.selectable(self._injector)
        ready = threading.Event()

        def serve() -> None:
            acceptor = self._container.listen("127.0.0.1:0", ssl_domain=self.ssl_domain)
            self.port = acceptor._selectable.getsockname()[1]
            ready.set()
            self._container.run()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._injector.trigger(ApplicationEvent("wire_stop"))
        self._thread.join(5)

    def on_wire_stop(self, event: proton.Event) -> None:
        self._injector.close()
        self._container.stop()

    def connection_string(self, host: str = "127.0.0.1", emulator: bool = True) -> str:
        flag = ";UseDevelopmentEmulator=true" if emulator else ""
        return f"Endpoint=sb://{host}:{self.port}/;SharedAccessKeyName=k;SharedAccessKey=TopSecretKey{flag}"

    def on_connection_bound(self, event: proton.Event) -> None:
        event.transport.require_auth(False)
        event.transport.sasl().allowed_mechs("ANONYMOUS")

    def on_connection_opening(self, event: proton.Event) -> None:
        self.connections += 1

    def on_link_opening(self, event: proton.Event) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        props = {str(k): v for k, v in (link.remote_properties or {}).items()}
        if link.is_sender:  # the client's receiver: responses go here, keyed by its target (reply-to)
            self._replies[link.remote_target.address] = link
            self.attaches.append(Attach(link.name, "receiver", link.remote_source.address,
                                        link.remote_target.address, props, link.remote_snd_settle_mode))
        else:
            self.attaches.append(Attach(link.name, "sender", link.remote_target.address, None, props,
                                        link.remote_snd_settle_mode))

    def on_message(self, event: proton.Event) -> None:
        msg = event.message
        address = event.receiver.remote_target.address
        if address == "$cbs":
            self.cbs_requests.append(msg)
            reply = Message(correlation_id=msg.id, properties={"status-code": proton.int32(self.cbs_status),
                                                               "status-description": "cbs"})
        else:
            self.requests.append((address, msg))
            if len(self.requests) in self.drop_on:
                event.connection.condition = Condition("amqp:connection:forced", "dropped by the test server")
                event.connection.close()
                return
            props, body = self.respond(address, msg)
            reply = Message(correlation_id=msg.id, properties=props, body=body)
        self._replies[msg.reply_to].send(reply)
