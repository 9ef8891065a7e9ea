"""A tiny raw proton client for management tests: exact request shapes, nothing hidden."""

from __future__ import annotations

import time
import uuid
from typing import Any

import proton
from proton.utils import BlockingConnection

from reconciler.emulator import Emulator
from reconciler.namespace.credentials import sas_token


class RawManagement:
    """One connection, a put-token for ``entity`` and a request/response link pair on its $management."""

    def __init__(self, emulator: Emulator, entity: str, *, token: bool = True, timeout: float = 5.0) -> None:
        self.emulator = emulator
        self.entity = entity
        self.conn = BlockingConnection(
            f"amqp://127.0.0.1:{emulator.port}", allowed_mechs="ANONYMOUS", timeout=timeout
        )
        self.cbs_status: int | None = None
        if token:
            self.cbs_status = self.put_token(f"sb://127.0.0.1:{emulator.port}/{entity}")
        node = f"{entity}/$management"
        self.sender = self.conn.create_sender(node, name=f"mgmt-send-{uuid.uuid4()}")
        self.receiver = self.conn.create_receiver(node, name=f"mgmt-recv-{uuid.uuid4()}", credit=100)

    def put_token(self, audience: str, *, key: str | None = None, expiry: int | None = None) -> int:
        token = sas_token(audience, self.emulator.key_name, key or self.emulator.key, expiry or int(time.time()) + 600)
        sender = self.conn.create_sender("$cbs", name=f"cbs-send-{uuid.uuid4()}")
        receiver = self.conn.create_receiver("$cbs", name=f"cbs-recv-{uuid.uuid4()}", credit=10)
        request = proton.Message(
            id=str(uuid.uuid4()),
            body=token,
            properties={"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience},
        )
        sender.send(request)
        reply = receiver.receive()
        sender.close()
        receiver.close()
        return int(reply.properties["status-code"])

    def request(self, operation: Any, body: Any, properties: dict | None = None) -> tuple[int, dict, Any]:
        """Send one request; returns (statusCode, application properties, body)."""
        message_id = str(uuid.uuid4())
        props = {"operation": operation}
        props.update(properties or {})
        self.sender.send(proton.Message(id=message_id, body=body, properties=props))
        reply = self.receiver.receive()
        assert reply.correlation_id == message_id
        return int(reply.properties["statusCode"]), dict(reply.properties), reply.body

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "RawManagement":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
